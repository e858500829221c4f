//! `GetReport` from the cache, encoded once per report instead of once per
//! call.
//!
//! The generated server answers `GetReport` by deep-cloning the cached
//! `Report` into a `GetReportResponse`, encoding it and dropping the clone:
//! under callgrind that is ~55,000 of the ~174,000 instructions a call costs
//! (Health/Check: ~108,000), so a cached `GetReport` ran at ~55 % of the
//! health check's rate. Here the readiness service is wrapped: a cached
//! `GetReport` is answered with the bytes of the response encoded when the
//! report last changed (one copy into the frame), and one that still holds
//! the caller's token with the "unchanged" answer encoded at the same time
//! (a few bytes); refreshes and every other method go to the generated
//! server unchanged. Framing, limits, timeouts and
//! errors stay tonic's (`tonic::server::Grpc`), only the codec differs.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use prost::{bytes::BufMut, Message};
use tonic::{
    codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::{http, Body, BoxFuture, Bytes, Service, StdError},
    server::{Grpc, NamedService, UnaryService},
    Request, Response, Status,
};

use crate::{
    agent::{service, state::State, token},
    proto::v1::{
        readiness_service_server::{ReadinessService, ReadinessServiceServer},
        GetReportRequest, Report,
    },
};

const GET_REPORT: &str = "/sandbox_readiness.v1.ReadinessService/GetReport";

/// The readiness service with a pre-encoded cached `GetReport`.
#[derive(Clone)]
pub struct Readiness {
    inner: ReadinessServiceServer<service::Service>,
    get_report: CachedGetReport,
    max_decoding: usize,
}

impl Readiness {
    pub fn new(
        svc: service::Service,
        state: State,
        max_decoding: usize,
        max_encoding: usize,
    ) -> Self {
        Self {
            inner: ReadinessServiceServer::new(svc.clone())
                .max_decoding_message_size(max_decoding)
                .max_encoding_message_size(max_encoding),
            get_report: CachedGetReport {
                svc: Arc::new(svc),
                state,
                last: Arc::new(Mutex::new(None)),
            },
            max_decoding,
        }
    }
}

impl NamedService for Readiness {
    const NAME: &'static str = <ReadinessServiceServer<service::Service> as NamedService>::NAME;
}

impl<B> Service<http::Request<B>> for Readiness
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != GET_REPORT {
            return self.inner.call(req);
        }
        let method = self.get_report.clone();
        let max_decoding = self.max_decoding;
        Box::pin(async move {
            let mut grpc =
                Grpc::new(PreEncodedCodec).apply_max_message_size_config(Some(max_decoding), None);
            Ok(grpc.unary(method, req).await)
        })
    }
}

/// The last report handed out, its token and both answers, encoded.
struct Encoded {
    report: Arc<Report>,
    token: String,
    full: Bytes,
    unchanged: Bytes,
}

type Last = Arc<Mutex<Option<Encoded>>>;

#[derive(Clone)]
struct CachedGetReport {
    svc: Arc<service::Service>,
    state: State,
    last: Last,
}

impl CachedGetReport {
    /// The encoded response for the latest report: "unchanged" when
    /// `if_changed_from` is its token. Encodes only when the report (the
    /// `Arc` the cache hands out) is not the one encoded last.
    fn latest(&self, if_changed_from: &str) -> Bytes {
        let report = self.state.latest();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let e = match last.take() {
            Some(e) if Arc::ptr_eq(&e.report, &report) => e,
            _ => {
                let token = token::token(token::report_key(&report));
                Encoded {
                    full: encode_response(&report, &token),
                    unchanged: encode_unchanged(&token),
                    token,
                    report,
                }
            }
        };
        // `token::holds` for this key, without parsing: tokens are
        // lowercase hex, so equal text is the only match.
        let bytes = if e.token == if_changed_from {
            e.unchanged.clone()
        } else {
            e.full.clone()
        };
        *last = Some(e);
        bytes
    }
}

/// `GetReportResponse { report, token }` encoded without cloning the report.
pub fn encode_response(report: &Report, token: &str) -> Bytes {
    let mut buf = Vec::with_capacity(report.encoded_len() + token.len() + 12);
    prost::encoding::message::encode(1, report, &mut buf);
    if !token.is_empty() {
        prost::encoding::string::encode(3, &token.to_string(), &mut buf);
    }
    Bytes::from(buf)
}

/// `GetReportResponse { unchanged: true, token }`.
fn encode_unchanged(token: &str) -> Bytes {
    let mut buf = Vec::with_capacity(token.len() + 8);
    prost::encoding::bool::encode(2, &true, &mut buf);
    prost::encoding::string::encode(3, &token.to_string(), &mut buf);
    Bytes::from(buf)
}

impl UnaryService<GetReportRequest> for CachedGetReport {
    type Response = Bytes;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn call(&mut self, request: Request<GetReportRequest>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let req = request.get_ref();
            if !req.refresh && !req.sandbox_probe {
                return Ok(Response::new(this.latest(&req.if_changed_from)));
            }
            let resp = this.svc.get_report(request).await?;
            Ok(resp.map(|r| Bytes::from(r.encode_to_vec())))
        })
    }
}

/// Decodes requests with prost; encodes responses that are already bytes.
struct PreEncodedCodec;

impl Codec for PreEncodedCodec {
    type Encode = Bytes;
    type Decode = GetReportRequest;
    type Encoder = BytesEncoder;
    type Decoder = ProstRequestDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstRequestDecoder
    }
}

struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }

    /// tonic's default 8 KiB frame buffer per response is a size musl's
    /// allocator maps and unmaps for every call; a report (~1.5 KiB) fits
    /// in 4 KiB, and a larger one just grows the buffer.
    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(4 * 1024, 32 * 1024)
    }
}

struct ProstRequestDecoder;

impl Decoder for ProstRequestDecoder {
    type Item = GetReportRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<GetReportRequest>, Status> {
        GetReportRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("cannot decode the request: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::{GetReportResponse, NodeIdentity, Sysctl};

    fn sample() -> Report {
        Report {
            node: Some(NodeIdentity {
                hostname: "worker-1".into(),
                kernel_release: "6.18".into(),
                ..NodeIdentity::default()
            }),
            generation: 7,
            fingerprint: "abc".into(),
            sysctls: vec![Sysctl {
                name: "user.max_user_namespaces".into(),
                state: 1,
                value: "11255".into(),
                error: String::new(),
            }],
            ..Report::default()
        }
    }

    #[test]
    fn encoded_response_is_the_generated_encoding() {
        let r = sample();
        let want = GetReportResponse {
            report: Some(r.clone()),
            unchanged: false,
            token: "0123456789abcdef".into(),
        }
        .encode_to_vec();
        let got = encode_response(&r, "0123456789abcdef");
        assert_eq!(got.as_ref(), want.as_slice());
        let back = GetReportResponse::decode(got).unwrap();
        assert_eq!(back.report, Some(r));
        let want = GetReportResponse {
            report: None,
            unchanged: true,
            token: "0123456789abcdef".into(),
        }
        .encode_to_vec();
        assert_eq!(
            encode_unchanged("0123456789abcdef").as_ref(),
            want.as_slice()
        );
    }

    /// A real owner task over a fixture /proc: the cached answer is reused
    /// while the report stays the same and follows it when it changes.
    #[tokio::test]
    async fn cached_get_report_follows_the_latest_report() {
        use std::{fs, time::Duration};

        use crate::{
            agent::state::{self, Timing},
            host::HostPaths,
            observe::{GvisorConfig, ObserveConfig},
            proto::v1::DesiredState,
            report::find_sysctl,
        };

        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        let limit = proc_root.join("sys/user/max_user_namespaces");
        fs::create_dir_all(limit.parent().unwrap()).unwrap();
        fs::write(&limit, "5\n").unwrap();
        let absent = dir.path().join("absent");
        let cfg = ObserveConfig {
            paths: HostPaths {
                proc_root,
                sys_root: absent.clone(),
                host_root: absent.clone(),
            },
            helper_exe: absent.clone(),
            probe_timeout: Duration::from_secs(2),
            extra_sysctls: Vec::new(),
            gvisor: GvisorConfig {
                runsc_path: absent.join("runsc"),
                shim_path: absent.join("shim"),
                cri_conf_dir: absent.clone(),
                cri_endpoint: format!("unix://{}", absent.join("cri.sock").display()),
                cri_timeout: Duration::from_secs(1),
                exec_timeout: Duration::from_secs(1),
                sandbox_timeout: Duration::from_secs(1),
                sandbox_env: Default::default(),
            },
            expose_machine_id: false,
            canary: Default::default(),
            require_runtime_root: false,
        };
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let timing = Timing {
            poll: Duration::from_secs(3600),
            probe: Duration::from_secs(3600),
            min_refresh: Duration::ZERO,
            min_sandbox: Duration::ZERO,
            canary_interval: Duration::ZERO,
            canary_schedule: Vec::new(),
            canary_sweep: false,
        };
        let (state, _owner) = state::start(cfg.clone(), timing, shutdown.clone()).await;
        let svc = service::Service::new(
            state.clone(),
            DesiredState::default(),
            4,
            Duration::from_secs(30),
            shutdown,
        );
        let mut method = CachedGetReport {
            svc: Arc::new(svc),
            state,
            last: Arc::new(Mutex::new(None)),
        };
        let value = |b: Bytes| -> String {
            let r = GetReportResponse::decode(b).unwrap().report.unwrap();
            find_sysctl(&r, "user.max_user_namespaces")
                .map(|s| s.value.clone())
                .unwrap_or_default()
        };
        let cached = GetReportRequest::default();
        let first = method
            .call(Request::new(cached.clone()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(value(first.clone()), "5");
        let again = method
            .call(Request::new(cached.clone()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(first.as_ptr(), again.as_ptr(), "not served from the cache");
        // The token: "unchanged" without a report while it holds.
        let token = GetReportResponse::decode(first.clone()).unwrap().token;
        let since = GetReportRequest {
            if_changed_from: token.clone(),
            ..GetReportRequest::default()
        };
        let same = GetReportResponse::decode(
            method
                .call(Request::new(since.clone()))
                .await
                .unwrap()
                .into_inner(),
        )
        .unwrap();
        assert!(same.unchanged && same.report.is_none() && same.token == token);

        fs::write(&limit, "7\n").unwrap();
        let refresh = GetReportRequest {
            refresh: true,
            ..GetReportRequest::default()
        };
        let fresh = method
            .call(Request::new(refresh))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(value(fresh), "7");
        let after = method
            .call(Request::new(cached))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(value(after), "7");
        let changed =
            GetReportResponse::decode(method.call(Request::new(since)).await.unwrap().into_inner())
                .unwrap();
        assert!(!changed.unchanged && changed.token != token);
        assert_eq!(value(changed.encode_to_vec().into()), "7");
    }

    #[test]
    fn empty_report_encodes_as_present() {
        // A default report is still a present (empty) message, as with the
        // generated encoding of Some(Report::default()).
        let want = GetReportResponse {
            report: Some(Report::default()),
            ..GetReportResponse::default()
        }
        .encode_to_vec();
        assert_eq!(
            encode_response(&Report::default(), "").as_ref(),
            want.as_slice()
        );
    }
}
