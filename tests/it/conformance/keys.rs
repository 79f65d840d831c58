//! `KeyStore`.

use std::sync::Arc;

use memmachine::store::Store;
use memmachine_core::error::Error;
use memmachine_core::model::{ApiKeyRecord, KeyScope};

use crate::conformance::support::{org, unique};

fn api_key(scope: KeyScope, created_at: i64) -> ApiKeyRecord {
    let id = unique();
    ApiKeyRecord {
        label: format!("label of {id}"),
        id,
        scope,
        salt: vec![1, 2, 3],
        hash: vec![4; 32],
        created_at_micros: created_at,
        revoked_at_micros: None,
    }
}

pub async fn api_keys_are_kept_listed_and_revoked(store: Arc<dyn Store>) {
    let admin = api_key(KeyScope::Admin, 2);
    let acme = api_key(KeyScope::Org(org()), 1);
    let mut revoked_before = api_key(KeyScope::Org(org()), 3);
    revoked_before.revoked_at_micros = Some(5);
    for key in [&admin, &acme, &revoked_before] {
        store.insert_key(key).await.unwrap();
    }
    let mut again = admin.clone();
    again.label = "another".into();
    assert!(matches!(
        store.insert_key(&again).await,
        Err(Error::AlreadyExists(_))
    ));
    assert_eq!(
        store.find_key(&admin.id).await.unwrap(),
        Some(admin.clone()),
        "unchanged"
    );
    assert_eq!(store.find_key(&acme.id).await.unwrap(), Some(acme.clone()));
    assert_eq!(
        store.find_key(&revoked_before.id).await.unwrap(),
        Some(revoked_before.clone())
    );
    assert_eq!(store.find_key(&unique()).await.unwrap(), None);
    let ours: Vec<ApiKeyRecord> = store
        .list_keys()
        .await
        .unwrap()
        .into_iter()
        .filter(|k| [&admin.id, &acme.id, &revoked_before.id].contains(&&k.id))
        .collect();
    assert_eq!(
        ours,
        [acme.clone(), admin.clone(), revoked_before.clone()],
        "oldest first, revoked too"
    );
    assert!(store.revoke_key(&acme.id).await.unwrap());
    let at = store
        .find_key(&acme.id)
        .await
        .unwrap()
        .unwrap()
        .revoked_at_micros
        .expect("revoked");
    assert!(at > 1_000_000, "revoked now");
    // Revoking again keeps the first time; an unknown id is false.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert!(store.revoke_key(&acme.id).await.unwrap());
    assert_eq!(
        store
            .find_key(&acme.id)
            .await
            .unwrap()
            .unwrap()
            .revoked_at_micros,
        Some(at)
    );
    assert!(store.revoke_key(&revoked_before.id).await.unwrap());
    assert_eq!(
        store
            .find_key(&revoked_before.id)
            .await
            .unwrap()
            .unwrap()
            .revoked_at_micros,
        Some(5)
    );
    assert!(!store.revoke_key(&unique()).await.unwrap());
    assert_eq!(
        store
            .find_key(&admin.id)
            .await
            .unwrap()
            .unwrap()
            .revoked_at_micros,
        None
    );
}
