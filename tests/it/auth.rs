//! Authentication and authorisation over real gRPC: keys made with the real
//! `memmachine keys` command, the whole matrix (no key, bad key, revoked key, another
//! org's key, admin), and the refusal to listen openly without `--auth`.

use std::process::Command;

use crate::common;
use crate::common::InProcess;
use crate::common::calls::{add, create_project, get_project, list_orgs, search};
use crate::common::child::Run;
use crate::common::keys::{create_key, keys_command};
use tonic::Code;

#[tokio::test]
async fn the_auth_matrix() {
    let server = InProcess::start_with(|config| config.auth = true).await;
    let dir = server.data_dir.path().to_path_buf();
    let admin = create_key(&dir, &["--admin", "--label", "operator"]);
    let acme = create_key(&dir, &["--org", "acme"]);
    let globex = create_key(&dir, &["--org", "globex"]);
    assert!(admin.starts_with("mm_") && acme != globex);
    let channel = server.channel().await;

    // Admin reaches every org.
    for org in ["acme", "globex"] {
        create_project(&channel, Some(&admin), org, "notes")
            .await
            .unwrap();
    }
    add(&channel, Some(&globex), "globex").await.unwrap();

    // No key, a malformed key, a well-formed unknown key: UNAUTHENTICATED, and nothing
    // is done.
    let unknown = format!("mm_0123456789ab_{}", "0".repeat(64));
    for key in [None, Some("not-a-key"), Some(unknown.as_str())] {
        let err = get_project(&channel, key, "acme", "notes")
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{key:?}: {err:?}");
        let err = add(&channel, key, "acme").await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated);
    }
    // A real id with the wrong secret.
    let forged = format!("{}{}", &acme[..acme.len() - 4], "ffff");
    let err = get_project(&channel, Some(&forged), "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    // An org key reaches its org...
    get_project(&channel, Some(&acme), "acme", "notes")
        .await
        .unwrap();
    add(&channel, Some(&acme), "acme").await.unwrap();
    assert_eq!(search(&channel, Some(&acme), "acme").await.unwrap(), 1);
    assert_eq!(
        list_orgs(&channel, Some(&acme), None).await.unwrap(),
        vec!["acme"]
    );
    // ...and nothing of another: PERMISSION_DENIED with the same answer whether the
    // project exists or not.
    let existing = get_project(&channel, Some(&acme), "globex", "notes")
        .await
        .unwrap_err();
    let missing = get_project(&channel, Some(&acme), "globex", "nothing-here")
        .await
        .unwrap_err();
    assert_eq!(existing.code(), Code::PermissionDenied);
    assert_eq!(
        (missing.code(), missing.message()),
        (existing.code(), existing.message())
    );
    for err in [
        add(&channel, Some(&acme), "globex").await.unwrap_err(),
        search(&channel, Some(&acme), "globex").await.unwrap_err(),
        create_project(&channel, Some(&acme), "globex", "new")
            .await
            .unwrap_err(),
        list_orgs(&channel, Some(&acme), Some("globex"))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    }
    // The universal project ("" org) is not the org key's either.
    let err = get_project(&channel, Some(&acme), "", "")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let mut orgs = list_orgs(&channel, Some(&admin), None).await.unwrap();
    orgs.dedup();
    assert_eq!(orgs, vec!["acme", "globex", "universal"]);
    assert_eq!(
        search(&channel, Some(&globex), "globex").await.unwrap(),
        1,
        "globex's memory is untouched by acme's calls"
    );

    // Health needs no key (probes carry none).
    let status = memmachine::probe::check(&server.url, "", std::time::Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );

    // `keys list` shows ids and scopes, never secrets; a revoked key stops at once.
    let acme_id = acme.split('_').nth(1).unwrap().to_string();
    let listed = keys_command(&dir, &["list"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.contains(&acme_id) && listed.contains("org:acme"),
        "{listed}"
    );
    assert!(listed.contains("admin") && listed.contains("operator"));
    for token in [&admin, &acme, &globex] {
        let secret = token.rsplit('_').next().unwrap();
        assert!(!listed.contains(secret));
    }
    let revoked = keys_command(&dir, &["revoke", &acme_id]);
    assert!(revoked.status.success());
    let err = get_project(&channel, Some(&acme), "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        String::from_utf8(keys_command(&dir, &["list"]).stdout)
            .unwrap()
            .lines()
            .any(|l| l.starts_with(&acme_id) && !l.contains(" - "))
    );
    let missing = keys_command(&dir, &["revoke", "000000000000"]);
    assert!(!missing.status.success());
    // Other keys are unaffected.
    get_project(&channel, Some(&globex), "globex", "notes")
        .await
        .unwrap();

    // The secret is nowhere in the database file (SQLite's, which the test can read).
    if !common::postgres::servers_on_postgres() {
        let db = std::fs::read(dir.join("memmachine.db")).unwrap();
        let secret = globex.rsplit('_').next().unwrap();
        assert!(!db.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn without_auth_every_org_is_reachable() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    add(&channel, None, "acme").await.unwrap();
    assert_eq!(search(&channel, None, "acme").await.unwrap(), 1);
    server.stop().await.unwrap();
}

#[test]
fn an_open_address_needs_auth_or_an_explicit_insecure_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .env_clear()
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(tempfile::tempdir().unwrap().path())
        .run();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--auth") && stderr.contains("--insecure-listen"),
        "{stderr}"
    );
    // The REST gateway's address is guarded the same way.
    let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .env_clear()
        .args(["config", "print", "--rest-listen", "0.0.0.0:8080"])
        .run();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("0.0.0.0:8080") && stderr.contains("--auth"),
        "{stderr}"
    );
    // `config print` resolves the same way, and accepts either flag.
    for flag in ["--auth", "--insecure-listen"] {
        let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .env_clear()
            .args(["config", "print", "--listen", "0.0.0.0:50051", flag])
            .run();
        assert!(
            out.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn keys_need_a_valid_org_or_admin() {
    let dir = tempfile::tempdir().unwrap();
    let none = keys_command(dir.path(), &["create"]);
    assert!(!none.status.success());
    let bad = keys_command(dir.path(), &["create", "--org", "no spaces"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("org"));
}

/// Every method, called with one org's key on another org's project: PERMISSION_DENIED,
/// and nothing of that org changes.
#[tokio::test]
// Some requests (ListSetTypes) have no field but the ids: the macro's update is empty.
#[allow(clippy::needless_update)]
async fn an_org_key_reaches_no_method_of_another_org() {
    use common::calls::{count, with_key};
    use memmachine_proto::v2 as pb;
    use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
    use memmachine_proto::v2::project_service_client::ProjectServiceClient;
    use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;

    let server = InProcess::start_with(|config| config.auth = true).await;
    let dir = server.data_dir.path().to_path_buf();
    let admin = create_key(&dir, &["--admin"]);
    let acme = create_key(&dir, &["--org", "acme"]);
    let channel = server.channel().await;
    create_project(&channel, Some(&admin), "globex", "notes")
        .await
        .unwrap();
    add(&channel, Some(&admin), "globex").await.unwrap();

    let mut projects = ProjectServiceClient::new(channel.clone());
    let mut memories = MemoryServiceClient::new(channel.clone());
    let key = Some(acme.as_str());
    let (org, project) = (|| "globex".to_string(), || "notes".to_string());
    let results: Vec<(&str, tonic::Status)> = vec![
        (
            "CreateProject",
            projects
                .create_project(with_key(
                    pb::CreateProjectRequest {
                        org_id: org(),
                        project_id: "new".into(),
                        ..Default::default()
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "GetProject",
            projects
                .get_project(with_key(
                    pb::GetProjectRequest {
                        org_id: org(),
                        project_id: project(),
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "ListProjects",
            projects
                .list_projects(with_key(
                    pb::ListProjectsRequest {
                        org_id: Some(org()),
                        ..Default::default()
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "DeleteProject",
            projects
                .delete_project(with_key(
                    pb::DeleteProjectRequest {
                        org_id: org(),
                        project_id: project(),
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "GetEpisodeCount",
            projects
                .get_episode_count(with_key(
                    pb::GetEpisodeCountRequest {
                        org_id: org(),
                        project_id: project(),
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "GetEpisodicMemoryConfig",
            projects
                .get_episodic_memory_config(with_key(
                    pb::GetEpisodicMemoryConfigRequest {
                        org_id: org(),
                        project_id: project(),
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "UpdateEpisodicMemoryConfig",
            projects
                .update_episodic_memory_config(with_key(
                    pb::UpdateEpisodicMemoryConfigRequest {
                        org_id: org(),
                        project_id: project(),
                        enabled: Some(false),
                        ..Default::default()
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "AddMemories",
            add(&channel, key, "globex").await.unwrap_err(),
        ),
        (
            "SearchMemories",
            search(&channel, key, "globex").await.unwrap_err(),
        ),
        (
            "ListMemories",
            memories
                .list_memories(with_key(
                    pb::ListMemoriesRequest {
                        org_id: org(),
                        project_id: project(),
                        ..Default::default()
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "DeleteEpisodicMemories",
            memories
                .delete_episodic_memories(with_key(
                    pb::DeleteEpisodicMemoriesRequest {
                        org_id: org(),
                        project_id: project(),
                        episode_ids: vec![uuid::Uuid::new_v4().to_string()],
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
        (
            "DeleteSemanticMemories",
            memories
                .delete_semantic_memories(with_key(
                    pb::DeleteSemanticMemoriesRequest {
                        org_id: org(),
                        project_id: project(),
                        feature_ids: vec!["1".into()],
                    },
                    key,
                ))
                .await
                .unwrap_err(),
        ),
    ];
    assert_eq!(results.len(), 12, "every method of both services");
    let mut semantic = SemanticServiceClient::new(channel.clone());
    macro_rules! denied {
        ($($method:ident($request:ident)),* $(,)?) => {
            vec![$((
                stringify!($method),
                semantic
                    .$method(with_key(
                        pb::$request {
                            org_id: org(),
                            project_id: project(),
                            ..Default::default()
                        },
                        key,
                    ))
                    .await
                    .unwrap_err(),
            )),*]
        };
    }
    let semantic_results: Vec<(&str, tonic::Status)> = denied![
        add_feature(AddFeatureRequest),
        get_feature(GetFeatureRequest),
        update_feature(UpdateFeatureRequest),
        create_set_type(CreateSetTypeRequest),
        list_set_types(ListSetTypesRequest),
        delete_set_type(DeleteSetTypeRequest),
        get_set_id(GetSetIdRequest),
        list_set_ids(ListSetIdsRequest),
        configure_set(ConfigureSetRequest),
        add_category(AddCategoryRequest),
        get_category(GetCategoryRequest),
        add_category_template(AddCategoryTemplateRequest),
        list_category_templates(ListCategoryTemplatesRequest),
        disable_category(DisableCategoryRequest),
        get_category_set_ids(GetCategorySetIdsRequest),
        delete_category(DeleteCategoryRequest),
        add_tag(AddTagRequest),
        delete_tag(DeleteTagRequest),
        search_features(SearchFeaturesRequest),
    ];
    assert_eq!(semantic_results.len(), 19, "every SemanticService method");
    for (method, status) in results.into_iter().chain(semantic_results) {
        assert_eq!(
            status.code(),
            Code::PermissionDenied,
            "{method}: {status:?}"
        );
    }
    // Untouched: the project, its episode and its config.
    assert_eq!(count(&channel, Some(&admin), "globex").await.unwrap(), 1);
    let config = ProjectServiceClient::new(channel.clone())
        .get_episodic_memory_config(with_key(
            pb::GetEpisodicMemoryConfigRequest {
                org_id: org(),
                project_id: project(),
            },
            Some(&admin),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(config.config.unwrap().enabled);
    server.stop().await.unwrap();
}
