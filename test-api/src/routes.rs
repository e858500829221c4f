//! Request paths and query strings, parsed as kube-apiserver's
//! `RequestInfoFactory` does (k8s.io/apiserver `pkg/endpoints/request/requestinfo.go`).

use crate::resources::Registry;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResPath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub sub: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    Resource(ResPath),
    Health,
    Unknown,
}

fn resource(reg: &Registry, group: &str, version: &str, segs: &[&str]) -> Route {
    let rp = |namespace: Option<&str>, rest: &[&str]| -> Route {
        if rest.is_empty() || rest.len() > 3 || rest.iter().any(|s| s.is_empty()) {
            return Route::Unknown;
        }
        Route::Resource(ResPath {
            group: group.to_string(),
            version: version.to_string(),
            namespace: namespace.map(str::to_string),
            plural: rest[0].to_string(),
            name: rest.get(1).map(|s| s.to_string()),
            sub: rest.get(2).map(|s| s.to_string()),
        })
    };
    // `namespaces/NS/PLURAL…` is a namespaced resource unless PLURAL names no
    // namespaced resource (then `namespaces/NAME/SUB` is the namespace's own
    // subresource).
    if segs.first() == Some(&"namespaces") && segs.len() >= 3 {
        let namespaced = reg
            .in_group_version(group, version)
            .any(|t| t.namespaced && t.plural == segs[2]);
        if namespaced {
            return rp(Some(segs[1]), &segs[2..]);
        }
    }
    rp(None, segs)
}

pub fn route(reg: &Registry, path: &str) -> Route {
    let trimmed = path.trim_end_matches('/');
    let segs: Vec<&str> = trimmed.split('/').skip(1).collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz"] | ["readyz"] | ["livez"] => Route::Health,
        ["api"] => Route::Api,
        ["api", v] => Route::GroupVersion(String::new(), v.to_string()),
        ["api", v, rest @ ..] => resource(reg, "", v, rest),
        ["apis"] => Route::Apis,
        ["apis", g] => Route::Group(g.to_string()),
        ["apis", g, v] => Route::GroupVersion(g.to_string(), v.to_string()),
        ["apis", g, v, rest @ ..] => resource(reg, g, v, rest),
        _ => Route::Unknown,
    }
}

fn unhex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `application/x-www-form-urlencoded` decoding of one query component.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (unhex(b[i + 1]), unhex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug, Clone, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(q: &str) -> Query {
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (percent_decode(k), percent_decode(v)),
                    None => (percent_decode(p), String::new()),
                })
                .collect(),
        )
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    /// `watch=1`, `watch=true` (and a bare `watch`).
    pub fn flag(&self, k: &str) -> bool {
        self.get(k)
            .is_some_and(|v| matches!(v, "" | "1" | "true" | "True"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use crate::schema::CrdSet;

    fn reg() -> Registry {
        Registry::new(&CrdSet::upstream().unwrap(), None)
    }

    #[test]
    fn paths() {
        let r = reg();
        assert_eq!(
            route(&r, "/api/v1"),
            Route::GroupVersion(String::new(), "v1".into())
        );
        let Route::Resource(p) = route(&r, "/api/v1/nodes/a/status") else {
            panic!()
        };
        assert_eq!(
            (p.plural.as_str(), p.name.as_deref(), p.sub.as_deref()),
            ("nodes", Some("a"), Some("status"))
        );
        let Route::Resource(p) = route(
            &r,
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m",
        ) else {
            panic!()
        };
        assert_eq!(
            (p.namespace.as_deref(), p.plural.as_str(), p.name.as_deref()),
            (Some("ns"), "machines", Some("m"))
        );
        let Route::Resource(p) = route(&r, "/api/v1/namespaces/ns/status") else {
            panic!()
        };
        assert_eq!(
            (p.plural.as_str(), p.name.as_deref(), p.sub.as_deref()),
            ("namespaces", Some("ns"), Some("status"))
        );
        assert_eq!(
            route(&r, "/apis/cluster.x-k8s.io"),
            Route::Group("cluster.x-k8s.io".into())
        );
        assert_eq!(route(&r, "/nope"), Route::Unknown);
    }

    #[test]
    fn queries() {
        let q = Query::parse(
            "labelSelector=a%3D1%2Cb+in+%28x%29&watch=1&fieldSelector=metadata.name%3Dn",
        );
        assert_eq!(q.get("labelSelector"), Some("a=1,b in (x)"));
        assert!(q.flag("watch"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=n"));
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("a%4"), "a%4");
    }
}
