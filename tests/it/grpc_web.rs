//! gRPC-Web for browser clients: real HTTP/1.1 requests in the gRPC-Web wire format
//! (length-prefixed frames, trailers in the body) on the gRPC port, and the CORS
//! preflight a browser sends first.

use crate::common::InProcess;
use crate::common::calls::frame;
use memmachine_proto::v2 as pb;
use prost::Message;

/// Splits a gRPC-Web response body into its data frames and its trailer text.
fn unframe(mut body: &[u8]) -> (Vec<Vec<u8>>, String) {
    let (mut data, mut trailers) = (Vec::new(), String::new());
    while body.len() >= 5 {
        let flag = body[0];
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        let payload = &body[5..5 + len];
        if flag & 0x80 != 0 {
            trailers.push_str(std::str::from_utf8(payload).unwrap());
        } else {
            data.push(payload.to_vec());
        }
        body = &body[5 + len..];
    }
    (data, trailers)
}

/// A server with `--auth`, and a key for org acme.
async fn server_and_key() -> (InProcess, String) {
    let server = InProcess::start_with(|config| config.auth = true).await;
    let key = memmachine::auth::manage::create(
        &server.store,
        memmachine_core::model::KeyScope::Org("acme".into()),
        "browser",
    )
    .await
    .unwrap()
    .token;
    (server, key)
}

async fn call(
    server: &InProcess,
    key: &str,
    method: &str,
    body: Vec<u8>,
) -> (reqwest::header::HeaderMap, Vec<Vec<u8>>, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/memmachine.v2.{method}", server.url))
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .header("origin", "http://app.example")
        .header("authorization", format!("Bearer {key}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), reqwest::Version::HTTP_11);
    let headers = response.headers().clone();
    let (data, trailers) = unframe(&response.bytes().await.unwrap());
    (headers, data, trailers)
}

/// The grpc-status of a gRPC-Web answer (in the headers when there is no message,
/// else in the trailer frame).
fn status(headers: &reqwest::header::HeaderMap, trailers: &str) -> String {
    headers
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string())
        .or_else(|| {
            trailers
                .lines()
                .find_map(|l| l.trim().strip_prefix("grpc-status:").map(str::to_string))
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn browsers_call_over_grpc_web() {
    let (server, key) = server_and_key().await;
    let (headers, data, trailers) = call(
        &server,
        &key,
        "ProjectService/CreateProject",
        frame(&pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: "web".into(),
            description: "from a browser".into(),
            ..Default::default()
        }),
    )
    .await;
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/grpc-web")
    );
    assert_eq!(headers["access-control-allow-origin"], "http://app.example");
    assert!(trailers.contains("grpc-status:0"), "{trailers:?}");
    let created = pb::CreateProjectResponse::decode(data[0].as_slice()).unwrap();
    assert_eq!(created.project.unwrap().description, "from a browser");

    // Errors come back as gRPC statuses (in the headers when there is no message).
    let (headers, data, trailers) = call(
        &server,
        &key,
        "ProjectService/GetProject",
        frame(&pb::GetProjectRequest {
            org_id: "acme".into(),
            project_id: "missing".into(),
        }),
    )
    .await;
    assert!(data.is_empty());
    assert_eq!(status(&headers, &trailers), "5", "NOT_FOUND");

    // Bytes that are not the request message: INVALID_ARGUMENT, not INTERNAL.
    let mut garbage = vec![0u8, 0, 0, 0, 3];
    garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
    let (headers, _, trailers) = call(&server, &key, "ProjectService/GetProject", garbage).await;
    assert_eq!(status(&headers, &trailers), "3", "INVALID_ARGUMENT");
    server.stop().await.unwrap();
}

async fn preflight(server: &InProcess) -> reqwest::Response {
    reqwest::Client::new()
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/memmachine.v2.MemoryService/SearchMemories", server.url),
        )
        .header("origin", "http://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,x-grpc-web,authorization",
        )
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn with_auth_the_cors_preflight_allows_grpc_web_headers() {
    let (server, _) = server_and_key().await;
    let response = preflight(&server).await;
    assert!(response.status().is_success(), "{}", response.status());
    let headers = response.headers();
    assert_eq!(headers["access-control-allow-origin"], "http://app.example");
    let allowed = headers["access-control-allow-headers"].to_str().unwrap();
    for header in ["content-type", "x-grpc-web", "authorization"] {
        assert!(allowed.contains(header), "{allowed}");
    }
    server.stop().await.unwrap();
}

/// Without `--auth`, no other origin may call: any page in a browser could otherwise
/// read and write every org's memories.
#[tokio::test]
async fn without_auth_no_other_origin_may_call() {
    let server = InProcess::start().await;
    let response = preflight(&server).await;
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "{:?}",
        response.headers()
    );
    server.stop().await.unwrap();
}
