//! What a pool asks the proof to run: the MachineDeployment's
//! `sandbox-readiness.io/prove` annotation (which pods) and
//! `sandbox-readiness.io/proof-image` (which image). Pure.
//!
//! Why an annotation on the MachineDeployment, not a field of the
//! controller's configuration: the pool is where the operator already says
//! what its workers are for (the readiness gate in its template, the mirror
//! annotation beside this one), a pool without gVisor must not be asked for
//! a gVisor pod, and Cozystack and Cluster API users edit MachineDeployments,
//! not the controller's Deployment. The annotation lives in the management
//! cluster, which only the platform's operators write: a tenant cannot turn
//! the proof on (or off) from its own cluster. No annotation, no proof: off
//! by default, and turning it on is this one annotation.
//!
//! The value is a comma-separated list of pods, each `CLASS` or
//! `CLASS+userns`: CLASS a RuntimeClass name (the pod's `runtimeClassName`)
//! or `default` (none: the node's default handler), `+userns` asking for
//! `hostUsers: false`. `default+userns, gvisor` is two pods: a
//! user-namespaced pod on the default handler, and a gVisor pod.

/// The MachineDeployment annotation naming the proof pods.
pub const PROVE_ANNOTATION: &str = "sandbox-readiness.io/prove";
/// The MachineDeployment annotation naming the proof pods' image.
pub const IMAGE_ANNOTATION: &str = "sandbox-readiness.io/proof-image";
/// The proof pods' image unless the pool names another: the sandbox
/// (pause) image containerd pins on the node, so nothing is pulled. It must
/// be the one the node's CRI pins (`crictl info`: `sandboxImage`); name
/// yours in [`IMAGE_ANNOTATION`] if it differs.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// At most this many pods per proof.
pub const MAX_PODS: usize = 4;

/// One proof pod's requirements.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Combo {
    /// `runtimeClassName`; `None`: the default handler.
    pub class: Option<String>,
    /// `hostUsers: false`.
    pub userns: bool,
}

impl Combo {
    /// As written in the annotation (`default+userns`, `gvisor`).
    pub fn name(&self) -> String {
        let class = self.class.as_deref().unwrap_or("default");
        if self.userns {
            format!("{class}+userns")
        } else {
            class.to_string()
        }
    }

    /// As it ends a pod's name (`default-userns`, `gvisor`).
    pub fn slug(&self) -> String {
        self.name().replace('+', "-")
    }
}

/// What a pool asks the proof to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Sorted, no duplicates.
    pub combos: Vec<Combo>,
    pub image: String,
}

impl Request {
    /// The pods as the Machine's condition names them (`default+userns, gvisor`).
    pub fn names(&self) -> String {
        self.combos
            .iter()
            .map(Combo::name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A DNS label (RFC 1123), as a RuntimeClass name must be.
fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// An image reference: registry, path, tag and digest characters only
/// (it becomes a pod's `image`; nothing else is accepted).
fn image_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 512
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"./:@_-".contains(&c))
        && s.as_bytes()[0].is_ascii_alphanumeric()
}

/// The pool's request from its two annotations. `Ok(None)`: the pool asks
/// for no proof (no annotation, or an empty one). `Err`: one line saying
/// what is wrong (the tenant's text is cut and cleaned).
pub fn parse(prove: Option<&str>, image: Option<&str>) -> Result<Option<Request>, String> {
    let Some(prove) = prove.map(str::trim).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let show = |s: &str| sandbox_readiness::text::clean_capped(s, 80);
    let mut combos = Vec::new();
    for item in prove.split(',').map(str::trim) {
        let (class, userns) = match item.split_once('+') {
            Some((c, "userns")) => (c, true),
            Some(_) => {
                return Err(format!(
                    "{PROVE_ANNOTATION}: {:?} is not CLASS or CLASS+userns",
                    show(item)
                ))
            }
            None => (item, false),
        };
        if !dns_label(class) {
            return Err(format!(
                "{PROVE_ANNOTATION}: {:?} is not a RuntimeClass name or \"default\"",
                show(class)
            ));
        }
        let class = (class != "default").then(|| class.to_string());
        combos.push(Combo { class, userns });
    }
    combos.sort();
    combos.dedup();
    if combos.len() > MAX_PODS {
        return Err(format!(
            "{PROVE_ANNOTATION}: {} pods asked; at most {MAX_PODS}",
            combos.len()
        ));
    }
    let image = match image.map(str::trim) {
        None | Some("") => DEFAULT_IMAGE.to_string(),
        Some(i) if image_ok(i) => i.to_string(),
        Some(i) => {
            return Err(format!(
                "{IMAGE_ANNOTATION}: {:?} is not an image reference",
                show(i)
            ))
        }
    };
    Ok(Some(Request { combos, image }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(class: Option<&str>, userns: bool) -> Combo {
        Combo {
            class: class.map(str::to_string),
            userns,
        }
    }

    #[test]
    fn the_annotation_reads_as_the_docs_say() {
        assert_eq!(parse(None, None), Ok(None));
        assert_eq!(parse(Some("  "), Some("x")), Ok(None));
        let r = parse(Some("gvisor+userns, default+userns,gvisor, gvisor"), None)
            .unwrap()
            .unwrap();
        assert_eq!(
            r.combos,
            [
                c(None, true),
                c(Some("gvisor"), false),
                c(Some("gvisor"), true)
            ]
        );
        assert_eq!(r.names(), "default+userns, gvisor, gvisor+userns");
        assert_eq!(r.image, DEFAULT_IMAGE);
        assert_eq!(r.combos[0].slug(), "default-userns");
        let r = parse(Some("default"), Some("ghcr.io/x/pause@sha256:ab12"))
            .unwrap()
            .unwrap();
        assert_eq!(r.combos, [c(None, false)]);
        assert_eq!(r.image, "ghcr.io/x/pause@sha256:ab12");
    }

    #[test]
    fn a_bad_annotation_is_one_clean_line() {
        for (prove, image, says) in [
            ("gvisor+root", None, "is not CLASS or CLASS+userns"),
            ("../etc", None, "is not a RuntimeClass name"),
            ("Gvisor", None, "is not a RuntimeClass name"),
            ("a,,b", None, "is not a RuntimeClass name"),
            ("a,b,c,d,e", None, "5 pods asked; at most 4"),
            ("gvisor", Some("x y"), "is not an image reference"),
            ("gvisor", Some("-x"), "is not an image reference"),
        ] {
            let e = parse(Some(prove), image).unwrap_err();
            assert!(e.contains(says), "{prove:?} {image:?}: {e}");
            assert!(!e.contains('\n'));
        }
        let long = format!("{}\n", "x".repeat(5000));
        let e = parse(Some(&long), None).unwrap_err();
        assert!(e.len() < 300 && !e.contains('\n'), "{e}");
    }
}
