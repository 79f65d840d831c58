//! TLS with certificates made in the test (rcgen): a server certificate checked by the
//! client, and client certificates checked by the server (`--tls-client-ca`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::InProcess;
use crate::common::pki::{ca, leaf};
use memmachine::config::TlsFiles;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::health_check_response::ServingStatus;

struct Pki {
    dir: tempfile::TempDir,
    ca: String,
    client_cert: String,
    client_key: String,
    /// A client certificate from a CA the server does not trust.
    stranger_cert: String,
    stranger_key: String,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let authority = ca("memmachine test CA");
        let (server_cert, server_key) = leaf(&["localhost", "127.0.0.1"], &authority);
        let (client_cert, client_key) = leaf(&["client"], &authority);
        let (stranger_cert, stranger_key) = leaf(&["stranger"], &ca("another CA"));
        std::fs::write(dir.path().join("ca.pem"), authority.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), server_cert).unwrap();
        std::fs::write(dir.path().join("server.key"), server_key).unwrap();
        Pki {
            ca: authority.pem(),
            dir,
            client_cert,
            client_key,
            stranger_cert,
            stranger_key,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn files(&self, client_ca: bool) -> TlsFiles {
        TlsFiles {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: client_ca.then(|| self.path("ca.pem")),
        }
    }
}

fn https(server: &InProcess) -> String {
    server.url.replacen("http://", "https://", 1)
}

async fn connect(
    server: &InProcess,
    pki: &Pki,
    identity: Option<(&str, &str)>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Endpoint::from_shared(https(server))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .tls_config(tls)?
        .connect()
        .await
}

async fn get_project(channel: Channel) -> Result<(), tonic::Status> {
    ProjectServiceClient::new(channel)
        .get_project(pb::GetProjectRequest {
            org_id: "universal".into(),
            project_id: "universal".into(),
        })
        .await
        .map(drop)
}

async fn wait_serving(url: &str, ca: &Path) {
    let tls = memmachine::probe::ProbeTls {
        ca: ca.to_path_buf(),
        domain: Some("localhost".into()),
        identity: None,
    };
    for _ in 0..200 {
        if let Ok(ServingStatus::Serving) =
            memmachine::probe::check(url, "", Duration::from_secs(5), Some(&tls)).await
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the TLS server did not become ready");
}

#[tokio::test]
async fn tls_serves_clients_that_trust_its_certificate() {
    let pki = Pki::new();
    let server = InProcess::launch_with(|config| config.tls = Some(pki.files(false))).await;
    // `memmachine health --tls-ca` speaks TLS too.
    wait_serving(&https(&server), &pki.path("ca.pem")).await;

    get_project(connect(&server, &pki, None).await.unwrap())
        .await
        .unwrap();
    // Plaintext gets no answer from a TLS port.
    let plain = memmachine::probe::check(&server.url, "", Duration::from_secs(2), None).await;
    assert!(plain.is_err(), "{plain:?}");
    // A client that trusts another CA refuses the server.
    let mut other = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca("another CA").pem()))
        .domain_name("localhost");
    other = other.timeout(Duration::from_secs(5));
    let refused = match Endpoint::from_shared(https(&server))
        .unwrap()
        .tls_config(other)
        .unwrap()
        .connect()
        .await
    {
        Err(_) => true,
        Ok(channel) => get_project(channel).await.is_err(),
    };
    assert!(refused);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn client_certificates_are_required_when_a_client_ca_is_set() {
    let pki = Pki::new();
    let server = InProcess::launch_with(|config| config.tls = Some(pki.files(true))).await;
    let client = (pki.client_cert.as_str(), pki.client_key.as_str());
    let mut ready = false;
    for _ in 0..200 {
        if let Ok(channel) = connect(&server, &pki, Some(client)).await
            && get_project(channel).await.is_ok()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "a client with a certificate from the CA is served");
    // `memmachine health` presents one too when given it.
    std::fs::write(pki.path("client.pem"), &pki.client_cert).unwrap();
    std::fs::write(pki.path("client.key"), &pki.client_key).unwrap();
    let probe = |identity| memmachine::probe::ProbeTls {
        ca: pki.path("ca.pem"),
        domain: Some("localhost".into()),
        identity,
    };
    let with_cert = probe(Some((pki.path("client.pem"), pki.path("client.key"))));
    assert_eq!(
        memmachine::probe::check(
            &https(&server),
            "",
            Duration::from_secs(5),
            Some(&with_cert)
        )
        .await
        .unwrap(),
        ServingStatus::Serving
    );
    let without = probe(None);
    assert!(
        memmachine::probe::check(&https(&server), "", Duration::from_secs(5), Some(&without))
            .await
            .is_err()
    );

    for identity in [
        None,
        Some((pki.stranger_cert.as_str(), pki.stranger_key.as_str())),
    ] {
        let served = match connect(&server, &pki, identity).await {
            Err(_) => false,
            Ok(channel) => get_project(channel).await.is_ok(),
        };
        assert!(
            !served,
            "no certificate, or one from another CA, is refused"
        );
    }
    server.stop().await.unwrap();
}
