//! A client-side request limit per API server, as client-go's
//! (`--kube-qps`, `--kube-burst`; client-go's `flowcontrol` token bucket,
//! kubernetes/client-go `util/flowcontrol/throttle.go`): a bucket of
//! `burst` tokens refilled at `qps` per second; each request takes one,
//! and waits for it when the bucket is empty. A tower layer on the kube
//! client, so every request (list, watch, get, patch) counts; the Event
//! recorder has a client and so a bucket of its own (`run::run_gated`).
//!
//! One bucket per [`client`] built: the management cluster's and each
//! workload cluster's API server have their own. And one deadline per
//! call ([`timed`]).

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use kube::{client::ClientBuilder, Client, Config};
use tower::{Layer, Service};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
}

/// The Lease client's own bucket: an elector makes one request per retry
/// period (2 s) and one on release; 5/s with a burst of 5 never throttles
/// it, and it shares nothing with the reconciles' --kube-qps.
pub const LEASE: Limits = Limits { qps: 5.0, burst: 5 };

impl Default for Limits {
    fn default() -> Self {
        Limits {
            qps: 50.0,
            burst: 100,
        }
    }
}

/// This controller's `User-Agent`: kube-rs sends none, and an API server's
/// audit log and its API priority and fairness can then tell these
/// requests from every other client's only by credentials.
const USER_AGENT: &str = concat!("sandbox-readiness-controller/", env!("CARGO_PKG_VERSION"));

/// A kube client for `config` behind its own token bucket of `l`, naming
/// itself.
pub fn client(mut config: Config, l: Limits) -> Result<Client, kube::Error> {
    config.headers.push((
        http::header::USER_AGENT,
        http::header::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&QpsLayer::new(l))
        .build())
}

/// Every single request waits at most this long: a hung API server must not
/// hold a reconcile for kube's 295 s read timeout (sized for watches).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `f` with [`CALL_TIMEOUT`]; a timeout reads as a service error.
pub async fn timed<T>(f: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service("no answer within 10 s".into())),
    }
}

/// The token bucket. Pure over the instants it is given.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub fn new(l: Limits, now: Instant) -> Bucket {
        let burst = f64::from(l.burst.max(1));
        Bucket {
            qps: l.qps,
            burst,
            state: Mutex::new((burst, now)),
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(s.1).as_secs_f64();
        s.0 = (s.0 + elapsed * self.qps).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - s.0) / self.qps))
        }
    }
}

#[derive(Clone)]
pub struct QpsLayer {
    bucket: Arc<Bucket>,
}

impl QpsLayer {
    pub fn new(l: Limits) -> QpsLayer {
        QpsLayer {
            bucket: Arc::new(Bucket::new(l, Instant::now())),
        }
    }
}

impl<S> Layer<S> for QpsLayer {
    type Service = Qps<S>;
    fn layer(&self, inner: S) -> Qps<S> {
        Qps {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            token: false,
        }
    }
}

/// The service: ready only once it holds a token (tower's contract: the
/// caller polls readiness before each call, as kube's buffer does).
pub struct Qps<S> {
    inner: S,
    bucket: Arc<Bucket>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    token: bool,
}

impl<S, R> Service<R> for Qps<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.token {
            if let Some(w) = self.wait.as_mut() {
                if w.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.token = true,
                Err(d) => self.wait = Some(Box::pin(tokio::time::sleep(d))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let t0 = Instant::now();
        let b = Bucket::new(
            Limits {
                qps: 10.0,
                burst: 3,
            },
            t0,
        );
        for _ in 0..3 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        assert_eq!(b.take(t0 + Duration::from_millis(100)), Ok(()));
        assert!(b.take(t0 + Duration::from_millis(150)).is_err());
        // A long rest refills only up to the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }
}
