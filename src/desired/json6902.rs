//! RFC 6902 JSON Patch over `serde_json::Value`, as CABPT's `configPatches`
//! need it (through Talos's `configpatcher.JSON6902`, which uses
//! evanphx/json-patch: an `add` whose parent does not exist fails, `-`
//! appends to an array, a failed operation leaves the document as it was).
//! Pure. Errors name the operation and the path (from the template), never
//! a value.

use serde_json::Value;

/// One operation, as the template writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Add(String, Value),
    Remove(String),
    Replace(String, Value),
    Move { from: String, path: String },
    Copy { from: String, path: String },
    Test(String, Value),
}

fn shown(s: &str) -> String {
    format!("{:?}", s.chars().take(80).collect::<String>())
}

impl Op {
    /// An operation from its JSON form (`{"op", "path", "value"|"from"}`).
    pub fn from_json(v: &Value) -> Result<Op, String> {
        let field = |f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
        let op = field("op").unwrap_or_default();
        let path = field("path").ok_or_else(|| format!("{} has no path", shown(&op)))?;
        let at = shown(&path);
        let value = || {
            v.get("value")
                .cloned()
                .ok_or_else(|| format!("{op} {at} has no value"))
        };
        let from = || field("from").ok_or_else(|| format!("{op} {at} has no from"));
        Ok(match op.as_str() {
            "add" => Op::Add(path, value()?),
            "remove" => Op::Remove(path),
            "replace" => Op::Replace(path, value()?),
            "move" => Op::Move {
                from: from()?,
                path,
            },
            "copy" => Op::Copy {
                from: from()?,
                path,
            },
            "test" => Op::Test(path, value()?),
            other => return Err(format!("unknown op {}", shown(other))),
        })
    }
}

/// The reference tokens of a JSON pointer (`/a~1b/0` → `a/b`, `0`).
fn tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| format!("{} is not a JSON pointer", shown(path)))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn index(token: &str, len: usize, append: bool) -> Option<usize> {
    if append && token == "-" {
        return Some(len);
    }
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    let i: usize = token.parse().ok()?;
    (if append { i <= len } else { i < len }).then_some(i)
}

fn get_mut<'a>(doc: &'a mut Value, toks: &[String]) -> Option<&'a mut Value> {
    toks.iter().try_fold(doc, |v, t| match v {
        Value::Object(m) => m.get_mut(t),
        Value::Array(a) => {
            let i = index(t, a.len(), false)?;
            a.get_mut(i)
        }
        _ => None,
    })
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let toks = tokens(path)?;
    let Some((last, parent)) = toks.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(m)) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let i = index(last, a.len(), true).ok_or("the array index is invalid")?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err("the parent does not exist".into()),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let toks = tokens(path)?;
    let Some((last, parent)) = toks.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(m)) => m
            .remove(last)
            .ok_or_else(|| "the path does not exist".into()),
        Some(Value::Array(a)) => {
            let i = index(last, a.len(), false).ok_or("the path does not exist")?;
            Ok(a.remove(i))
        }
        _ => Err("the path does not exist".into()),
    }
}

fn apply_one(doc: &mut Value, op: &Op) -> Result<(), String> {
    match op {
        Op::Add(p, v) => add(doc, p, v.clone()),
        Op::Remove(p) => remove(doc, p).map(drop),
        Op::Replace(p, v) => {
            let toks = tokens(p)?;
            // evanphx/json-patch (v5.9.11+incompatible, CABPT's and
            // machinery's) replaces a missing key of an existing object as
            // an add; a missing array index or parent still fails.
            if let Some((last, parent)) = toks.split_last() {
                if let Some(Value::Object(m)) = get_mut(doc, parent) {
                    m.insert(last.clone(), v.clone());
                    return Ok(());
                }
            }
            let t = get_mut(doc, &toks).ok_or("the path does not exist")?;
            *t = v.clone();
            Ok(())
        }
        Op::Move { from, path } => {
            if path.starts_with(&format!("{from}/")) {
                return Err("cannot move a value inside itself".into());
            }
            let v = remove(doc, from)?;
            add(doc, path, v)
        }
        Op::Copy { from, path } => {
            let v = get_mut(doc, &tokens(from)?)
                .ok_or("the from path does not exist")?
                .clone();
            add(doc, path, v)
        }
        Op::Test(p, v) => match get_mut(doc, &tokens(p)?) {
            Some(t) if t == v => Ok(()),
            _ => Err("the value did not match".into()),
        },
    }
}

fn word(op: &Op) -> (&'static str, &str) {
    match op {
        Op::Add(p, _) => ("add", p),
        Op::Remove(p) => ("remove", p),
        Op::Replace(p, _) => ("replace", p),
        Op::Move { path, .. } => ("move", path),
        Op::Copy { path, .. } => ("copy", path),
        Op::Test(p, _) => ("test", p),
    }
}

/// Applies `ops` in order; on a failure the document is left as it was.
pub fn apply(doc: &mut Value, ops: &[Op]) -> Result<(), String> {
    let mut work = doc.clone();
    for op in ops {
        apply_one(&mut work, op).map_err(|e| {
            let (w, p) = word(op);
            format!("{w} {}: {e}", shown(p))
        })?;
    }
    *doc = work;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, ops: Value) -> Result<Value, String> {
        let ops: Vec<Op> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(Op::from_json)
            .collect::<Result<_, _>>()?;
        let mut d = doc;
        apply(&mut d, &ops).map(|()| d)
    }

    #[test]
    fn rfc_6902_appendix_a_cases() {
        let cases = [
            (
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz", "value": "qux"}]),
                Ok(json!({"baz": "qux", "foo": "bar"})),
            ),
            (
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
                Ok(json!({"foo": ["bar", "qux", "baz"]})),
            ),
            (
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "remove", "path": "/baz"}]),
                Ok(json!({"foo": "bar"})),
            ),
            (
                json!({"foo": ["bar", "qux", "baz"]}),
                json!([{"op": "remove", "path": "/foo/1"}]),
                Ok(json!({"foo": ["bar", "baz"]})),
            ),
            (
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "replace", "path": "/baz", "value": "boo"}]),
                Ok(json!({"baz": "boo", "foo": "bar"})),
            ),
            (
                json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
                json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
                Ok(json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})),
            ),
            (
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
                Ok(json!({"foo": ["all", "cows", "eat", "grass"]})),
            ),
            (
                json!({"baz": "qux", "foo": ["a", 2, "c"]}),
                json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}]),
                Ok(json!({"baz": "qux", "foo": ["a", 2, "c"]})),
            ),
            (
                json!({"baz": "qux"}),
                json!([{"op": "test", "path": "/baz", "value": "bar"}]),
                Err("test \"/baz\": the value did not match".to_string()),
            ),
            (
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]),
                Ok(json!({"foo": "bar", "child": {"grandchild": {}}})),
            ),
            (
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz/bat", "value": "qux"}]),
                Err("add \"/baz/bat\": the parent does not exist".to_string()),
            ),
            (
                json!({"/": 9, "~1": 10}),
                json!([{"op": "test", "path": "/~01", "value": 10}]),
                Ok(json!({"/": 9, "~1": 10})),
            ),
            (
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
                Ok(json!({"foo": ["bar", ["abc", "def"]]})),
            ),
            (
                json!({"foo": "bar"}),
                json!([{"op": "copy", "from": "/foo", "path": "/baz"}]),
                Ok(json!({"foo": "bar", "baz": "bar"})),
            ),
        ];
        for (doc, ops, want) in cases {
            assert_eq!(run(doc, ops.clone()), want, "{ops}");
        }
        // As evanphx/json-patch: replace of a missing key adds it.
        assert_eq!(
            run(
                json!({"a": {}}),
                json!([{"op": "replace", "path": "/a/b", "value": 1}])
            ),
            Ok(json!({"a": {"b": 1}}))
        );
        // A failure leaves the document as it was.
        let mut d = json!({"a": 1});
        let ops = [Op::Add("/b".into(), json!(2)), Op::Remove("/c".into())];
        assert!(apply(&mut d, &ops).is_err());
        assert_eq!(d, json!({"a": 1}));
    }
}
