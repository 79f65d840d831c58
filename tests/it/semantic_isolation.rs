//! Semantic memory isolation over the real gRPC API: every id of another project or
//! org (or of nothing at all) is `NOT_FOUND` on every method and leaves the owner's
//! memory untouched; org-level sets and set types are shared by the projects of their
//! org only. A property test drives random operations over two orgs of two projects
//! and compares what each project lists with an in-memory model.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::InProcess;
use crate::common::paging::collect_pages;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use tonic::transport::Channel;
use tonic::{Code, Status};

#[derive(Clone)]
struct Client {
    projects: ProjectServiceClient<Channel>,
    memory: MemoryServiceClient<Channel>,
    semantic: SemanticServiceClient<Channel>,
}

async fn client(server: &InProcess) -> Client {
    let channel = server.channel().await;
    Client {
        projects: ProjectServiceClient::new(channel.clone()),
        memory: MemoryServiceClient::new(channel.clone()),
        semantic: SemanticServiceClient::new(channel),
    }
}

/// An (org, project) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct At<'a>(&'a str, &'a str);

fn random_hex() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..24].to_string()
}

fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn metadata(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Client {
    async fn create(&mut self, at: At<'_>) {
        self.projects
            .create_project(pb::CreateProjectRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    async fn delete_project(&mut self, at: At<'_>) {
        self.projects
            .delete_project(pb::DeleteProjectRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
            })
            .await
            .unwrap();
    }

    async fn episode(&mut self, at: At<'_>, content: &str) -> String {
        self.memory
            .add_memories(pb::AddMemoriesRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                types: vec![],
                messages: vec![pb::MemoryMessage {
                    content: content.into(),
                    producer: "alice".into(),
                    role: "user".into(),
                    ..Default::default()
                }],
            })
            .await
            .unwrap()
            .into_inner()
            .results
            .remove(0)
            .uid
    }

    async fn set_type(&mut self, at: At<'_>, org_level: bool, tags: &[&str]) -> String {
        self.semantic
            .create_set_type(pb::CreateSetTypeRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                is_org_level: org_level,
                metadata_tags: tags.iter().map(|t| t.to_string()).collect(),
                name: format!("type of {tags:?}"),
                description: "a set type".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .set_type_id
    }

    async fn set_id(
        &mut self,
        at: At<'_>,
        org_level: bool,
        tags: &[(&str, &str)],
    ) -> Result<String, Status> {
        Ok(self
            .semantic
            .get_set_id(pb::GetSetIdRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                is_org_level: org_level,
                metadata_tags: tags.iter().map(|(k, _)| k.to_string()).collect(),
                set_metadata: metadata(tags),
            })
            .await?
            .into_inner()
            .set_id)
    }

    async fn add_category(
        &mut self,
        at: At<'_>,
        set_id: &str,
        name: &str,
    ) -> Result<String, Status> {
        Ok(self
            .semantic
            .add_category(pb::AddCategoryRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                set_id: set_id.into(),
                category_name: name.into(),
                prompt: format!("extract {name}"),
                description: format!("the {name}"),
            })
            .await?
            .into_inner()
            .category_id)
    }

    async fn add_template(&mut self, at: At<'_>, set_type: &str, name: &str) -> String {
        self.semantic
            .add_category_template(pb::AddCategoryTemplateRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                set_type_id: set_type.into(),
                category_name: name.into(),
                prompt: format!("extract {name}"),
                description: format!("the {name}"),
            })
            .await
            .unwrap()
            .into_inner()
            .category_id
    }

    async fn add_tag(&mut self, at: At<'_>, category: &str, name: &str) -> String {
        self.semantic
            .add_tag(pb::AddTagRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                category_id: category.into(),
                tag_name: name.into(),
                tag_description: format!("about {name}"),
            })
            .await
            .unwrap()
            .into_inner()
            .tag_id
    }

    #[allow(clippy::too_many_arguments)]
    async fn add_feature(
        &mut self,
        at: At<'_>,
        set_id: &str,
        category: &str,
        tag: &str,
        feature: &str,
        value: &str,
        citations: &[String],
    ) -> Result<String, Status> {
        Ok(self
            .semantic
            .add_feature(pb::AddFeatureRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                set_id: set_id.into(),
                category_name: category.into(),
                tag: tag.into(),
                feature: feature.into(),
                value: value.into(),
                feature_metadata: None,
                citations: citations.to_vec(),
            })
            .await?
            .into_inner()
            .feature_id)
    }

    async fn get_feature(&mut self, at: At<'_>, id: &str) -> Result<pb::SemanticFeature, Status> {
        Ok(self
            .semantic
            .get_feature(pb::GetFeatureRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                feature_id: id.into(),
                load_citations: true,
            })
            .await?
            .into_inner()
            .feature
            .expect("a feature"))
    }

    async fn get_category(&mut self, at: At<'_>, id: &str) -> Result<pb::Category, Status> {
        Ok(self
            .semantic
            .get_category(pb::GetCategoryRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                category_id: id.into(),
            })
            .await?
            .into_inner()
            .category
            .expect("a category"))
    }

    async fn templates(
        &mut self,
        at: At<'_>,
        set_type: &str,
    ) -> Result<Vec<pb::CategoryTemplate>, Status> {
        Ok(self
            .semantic
            .list_category_templates(pb::ListCategoryTemplatesRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                set_type_id: set_type.into(),
            })
            .await?
            .into_inner()
            .categories)
    }

    async fn category_sets(&mut self, at: At<'_>, id: &str) -> Result<Vec<String>, Status> {
        Ok(self
            .semantic
            .get_category_set_ids(pb::GetCategorySetIdsRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                category_id: id.into(),
            })
            .await?
            .into_inner()
            .set_ids)
    }

    async fn set_types(&mut self, at: At<'_>) -> Vec<pb::SetType> {
        self.semantic
            .list_set_types(pb::ListSetTypesRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .set_types
    }

    async fn sets(&mut self, at: At<'_>, selecting: &[(&str, &str)]) -> Vec<pb::SetEntry> {
        self.semantic
            .list_set_ids(pb::ListSetIdsRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                set_metadata: metadata(selecting),
            })
            .await
            .unwrap()
            .into_inner()
            .sets
    }

    async fn search(
        &mut self,
        at: At<'_>,
        query: &str,
        selecting: &[(&str, &str)],
    ) -> Vec<pb::SemanticFeature> {
        self.semantic
            .search_features(pb::SearchFeaturesRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                query: query.into(),
                top_k: Some(1000),
                set_metadata: metadata(selecting),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .features
    }

    async fn delete_features(&mut self, at: At<'_>, ids: &[String]) -> Result<i64, Status> {
        Ok(self
            .memory
            .delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                feature_ids: ids.to_vec(),
            })
            .await?
            .into_inner()
            .deleted_count)
    }

    /// Every feature the project lists, through pages of `page_size`.
    async fn list_features(
        &mut self,
        at: At<'_>,
        selecting: &[(&str, &str)],
        page_size: i32,
    ) -> Vec<pb::SemanticFeature> {
        let all = collect_pages(async |token| {
            let page = self
                .memory
                .list_memories(pb::ListMemoriesRequest {
                    org_id: at.0.into(),
                    project_id: at.1.into(),
                    r#type: MemoryType::Semantic as i32,
                    page_size: Some(page_size),
                    page_token: token,
                    set_metadata: metadata(selecting),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(page.episodes.is_empty());
            assert!(
                page.features.len() <= page_size as usize,
                "a page of {} features, asked for {page_size}",
                page.features.len()
            );
            (page.features, page.next_page_token)
        })
        .await;
        let ids: BTreeSet<&str> = all.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids.len(), all.len(), "a feature listed twice: {all:#?}");
        all
    }
}

/// Ids to call every method with, from a project that must not see them.
#[derive(Default)]
struct Foreign {
    /// Set ids (with a category name the set has, so only the set can be missing).
    sets: Vec<(String, String)>,
    features: Vec<String>,
    categories: Vec<String>,
    set_types: Vec<String>,
    tags: Vec<String>,
    /// Episode uids to cite in a feature of `own_set` (whose category is `own_category`).
    episodes: Vec<String>,
    own_set: Option<(String, String)>,
}

impl Foreign {
    /// Random ids that exist nowhere, of every kind and shape.
    fn random(own_set: Option<(String, String)>) -> Foreign {
        let mut sets: Vec<(String, String)> = ["user", "project", "org", "other"]
            .iter()
            .map(|kind| (format!("mem_{kind}_set_{}", random_hex()), "notes".into()))
            .collect();
        sets.push((format!("mem_user_set_{}", random_hex()), "profile".into()));
        Foreign {
            sets,
            features: vec![random_uuid(), random_uuid()],
            categories: vec![random_uuid()],
            set_types: vec![random_uuid()],
            tags: vec![random_uuid()],
            episodes: vec![random_uuid()],
            own_set,
        }
    }
}

/// Calls every method that takes one of `ids` from `at`, and returns what each answered
/// other than `NotFound` (an empty list is the expected outcome).
async fn not_found_everywhere(c: &mut Client, at: At<'_>, ids: &Foreign) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut expect = |what: String, result: Result<(), Status>| match result {
        Err(status) if status.code() == Code::NotFound => {}
        Err(status) => wrong.push(format!("{what}: {:?} {}", status.code(), status.message())),
        Ok(()) => wrong.push(format!("{what}: succeeded")),
    };
    let (org, project) = (at.0.to_string(), at.1.to_string());
    let mut s = c.semantic.clone();
    let mut m = c.memory.clone();
    for (set, category) in &ids.sets {
        expect(
            format!("AddFeature set {set}"),
            c.add_feature(at, set, category, "t", "f", "v", &[])
                .await
                .map(drop),
        );
        expect(
            format!("ConfigureSet {set}"),
            s.configure_set(pb::ConfigureSetRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                set_id: set.clone(),
                embedder_name: None,
                llm_name: None,
            })
            .await
            .map(drop),
        );
        expect(
            format!("ConfigureSet {set} (clearing)"),
            s.configure_set(pb::ConfigureSetRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                set_id: set.clone(),
                embedder_name: Some(String::new()),
                llm_name: Some(String::new()),
            })
            .await
            .map(drop),
        );
        expect(
            format!("AddCategory set {set}"),
            c.add_category(at, set, "intruder").await.map(drop),
        );
        expect(
            format!("DisableCategory set {set}"),
            s.disable_category(pb::DisableCategoryRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                set_id: set.clone(),
                category_name: category.clone(),
            })
            .await
            .map(drop),
        );
    }
    for feature in &ids.features {
        expect(
            format!("GetFeature {feature}"),
            c.get_feature(at, feature).await.map(drop),
        );
        expect(
            format!("UpdateFeature {feature} (value)"),
            s.update_feature(pb::UpdateFeatureRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                feature_id: feature.clone(),
                value: Some("overwritten".into()),
                ..Default::default()
            })
            .await
            .map(drop),
        );
        expect(
            format!("UpdateFeature {feature} (names and metadata)"),
            s.update_feature(pb::UpdateFeatureRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                feature_id: feature.clone(),
                tag: Some("hijacked".into()),
                feature: Some("hijacked".into()),
                metadata: Some(prost_types::Struct::default()),
                ..Default::default()
            })
            .await
            .map(drop),
        );
        expect(
            format!("DeleteSemanticMemories {feature}"),
            c.delete_features(at, std::slice::from_ref(feature))
                .await
                .map(drop),
        );
    }
    for category in &ids.categories {
        expect(
            format!("GetCategory {category}"),
            c.get_category(at, category).await.map(drop),
        );
        expect(
            format!("GetCategorySetIds {category}"),
            c.category_sets(at, category).await.map(drop),
        );
        expect(
            format!("AddTag {category}"),
            s.add_tag(pb::AddTagRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                category_id: category.clone(),
                tag_name: "intruder".into(),
                tag_description: String::new(),
            })
            .await
            .map(drop),
        );
        expect(
            format!("DeleteCategory {category}"),
            s.delete_category(pb::DeleteCategoryRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                category_id: category.clone(),
            })
            .await
            .map(drop),
        );
    }
    for set_type in &ids.set_types {
        expect(
            format!("ListCategoryTemplates {set_type}"),
            c.templates(at, set_type).await.map(drop),
        );
        expect(
            format!("AddCategoryTemplate {set_type}"),
            s.add_category_template(pb::AddCategoryTemplateRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                set_type_id: set_type.clone(),
                category_name: "intruder".into(),
                prompt: "intrude".into(),
                description: String::new(),
            })
            .await
            .map(drop),
        );
        expect(
            format!("DeleteSetType {set_type}"),
            s.delete_set_type(pb::DeleteSetTypeRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                set_type_id: set_type.clone(),
            })
            .await
            .map(drop),
        );
    }
    for tag in &ids.tags {
        expect(
            format!("DeleteTag {tag}"),
            s.delete_tag(pb::DeleteTagRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                tag_id: tag.clone(),
            })
            .await
            .map(drop),
        );
    }
    if let Some((set, category)) = &ids.own_set {
        for episode in &ids.episodes {
            expect(
                format!("AddFeature citing {episode} in {set}"),
                c.add_feature(
                    at,
                    set,
                    category,
                    "t",
                    "f",
                    "v",
                    std::slice::from_ref(episode),
                )
                .await
                .map(drop),
            );
        }
    }
    // Deleting several at once is all or none: one foreign id fails the call.
    if !ids.features.is_empty() {
        expect(
            "DeleteSemanticMemories (all at once)".into(),
            m.delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
                org_id: org.clone(),
                project_id: project.clone(),
                feature_ids: ids.features.clone(),
            })
            .await
            .map(drop),
        );
    }
    wrong
}

/// What a project holds, as read back through the API (to see that nothing changed).
#[derive(Debug, PartialEq)]
struct Snapshot {
    features: Vec<pb::SemanticFeature>,
    got: Vec<pb::SemanticFeature>,
    categories: Vec<pb::Category>,
    templates: Vec<Vec<pb::CategoryTemplate>>,
    category_sets: Vec<Vec<String>>,
    set_types: Vec<pb::SetType>,
    sets: Vec<pb::SetEntry>,
}

async fn snapshot(
    c: &mut Client,
    at: At<'_>,
    features: &[&str],
    categories: &[&str],
    set_types: &[&str],
) -> Snapshot {
    let mut snap = Snapshot {
        features: c.list_features(at, &[], 1000).await,
        got: Vec::new(),
        categories: Vec::new(),
        templates: Vec::new(),
        category_sets: Vec::new(),
        set_types: c.set_types(at).await,
        sets: c.sets(at, &[]).await,
    };
    for id in features {
        snap.got.push(c.get_feature(at, id).await.unwrap());
    }
    for id in categories {
        snap.categories.push(c.get_category(at, id).await.unwrap());
        snap.category_sets
            .push(c.category_sets(at, id).await.unwrap());
    }
    for id in set_types {
        snap.templates.push(c.templates(at, id).await.unwrap());
    }
    snap
}

fn ids_of(features: &[pb::SemanticFeature]) -> BTreeSet<String> {
    features.iter().map(|f| f.id.clone()).collect()
}

#[tokio::test]
async fn every_semantic_method_answers_not_found_for_other_projects_ids() {
    let server = InProcess::start().await;
    let mut c = client(&server).await;
    let one = At("acme", "one");
    let two = At("acme", "two");
    let other = At("other", "one");
    for at in [one, two, other] {
        c.create(at).await;
    }

    // acme/one: set types, sets, categories, templates, tags and features.
    let episode = c.episode(one, "We ship on Fridays, said the zebra.").await;
    let team_type = c.set_type(one, false, &["team"]).await;
    let region_type = c.set_type(one, true, &["region"]).await;
    let project_set = c.set_id(one, false, &[]).await.unwrap();
    let user_set = c
        .set_id(one, false, &[("producer_id", "alice")])
        .await
        .unwrap();
    let team_set = c.set_id(one, false, &[("team", "red")]).await.unwrap();
    let org_set = c.set_id(one, true, &[]).await.unwrap();
    let region_set = c.set_id(one, true, &[("region", "eu")]).await.unwrap();
    assert!(user_set.starts_with("mem_user_set_"), "{user_set}");
    let category = c.add_category(one, &project_set, "notes").await.unwrap();
    let org_category = c.add_category(one, &org_set, "org_notes").await.unwrap();
    let template = c.add_template(one, &team_type, "team_notes").await;
    let region_template = c.add_template(one, &region_type, "region_notes").await;
    let tag = c.add_tag(one, &category, "process").await;
    let template_tag = c.add_tag(one, &template, "rituals").await;
    let org_tag = c.add_tag(one, &org_category, "policy").await;
    let cite = std::slice::from_ref(&episode);
    let feature = c
        .add_feature(
            one,
            &project_set,
            "notes",
            "process",
            "release day",
            "Friday zebra",
            cite,
        )
        .await
        .unwrap();
    let user_feature = c
        .add_feature(
            one,
            &user_set,
            "profile",
            "preferences",
            "animal",
            "zebra",
            cite,
        )
        .await
        .unwrap();
    let team_feature = c
        .add_feature(
            one,
            &team_set,
            "team_notes",
            "rituals",
            "standup",
            "zebra time",
            &[],
        )
        .await
        .unwrap();
    let org_feature = c
        .add_feature(
            one,
            &org_set,
            "org_notes",
            "policy",
            "mascot",
            "a zebra",
            &[],
        )
        .await
        .unwrap();
    let region_feature = c
        .add_feature(
            one,
            &region_set,
            "region_notes",
            "law",
            "privacy",
            "GDPR zebra",
            &[],
        )
        .await
        .unwrap();
    let project_features = [&feature, &user_feature, &team_feature];
    let org_features = [&org_feature, &region_feature];

    let before = snapshot(
        &mut c,
        one,
        &[
            &feature,
            &user_feature,
            &team_feature,
            &org_feature,
            &region_feature,
        ],
        &[&category, &org_category, &template, &region_template],
        &[&team_type, &region_type],
    )
    .await;
    assert_eq!(before.features.len(), 5);
    assert_eq!(before.got[0].value, "Friday zebra");
    assert_eq!(before.got[0].citations, [episode.as_str()]);
    assert_eq!(before.categories[0].tags.len(), 1);
    assert_eq!(before.categories[0].tags[0].name, "process");
    assert_eq!(before.templates[0].len(), 1);
    assert_eq!(before.set_types.len(), 2);
    assert_eq!(before.sets.len(), 5);
    assert_eq!(before.category_sets[2], [team_set.as_str()]);
    assert_eq!(before.category_sets[3], [region_set.as_str()]);

    // The others: a project set with a category of their own, a feature and an episode.
    let mut own = HashMap::new();
    for at in [two, other] {
        let set = c.set_id(at, false, &[]).await.unwrap();
        assert_ne!(set, project_set);
        c.add_category(at, &set, "notes").await.unwrap();
        let mine = c
            .add_feature(
                at,
                &set,
                "notes",
                "process",
                "release day",
                "Monday zebra",
                &[],
            )
            .await
            .unwrap();
        let episode = c.episode(at, "my own episode").await;
        c.add_feature(at, &set, "notes", "cited", "own", "zebra", &[episode])
            .await
            .expect("citing an episode of the caller's own project works");
        own.insert(at, (set, mine));
    }

    // acme/one's project-level ids, from acme/two and from other/one.
    let project_level = |own_set: &String| Foreign {
        sets: vec![
            (project_set.clone(), "notes".into()),
            (user_set.clone(), "profile".into()),
            (team_set.clone(), "team_notes".into()),
        ],
        features: project_features.iter().map(|f| f.to_string()).collect(),
        categories: vec![category.clone(), template.clone()],
        set_types: vec![team_type.clone()],
        tags: vec![tag.clone(), template_tag.clone()],
        episodes: vec![episode.clone()],
        own_set: Some((own_set.clone(), "notes".into())),
    };
    // acme's org-level ids, which other/one must not see either.
    let org_level = Foreign {
        sets: vec![
            (org_set.clone(), "org_notes".into()),
            (region_set.clone(), "region_notes".into()),
        ],
        features: org_features.iter().map(|f| f.to_string()).collect(),
        categories: vec![org_category.clone(), region_template.clone()],
        set_types: vec![region_type.clone()],
        tags: vec![org_tag.clone()],
        ..Default::default()
    };
    for at in [two, other] {
        let wrong = not_found_everywhere(&mut c, at, &project_level(&own[&at].0)).await;
        assert!(wrong.is_empty(), "from {at:?}, acme/one's ids: {wrong:#?}");
    }
    let wrong = not_found_everywhere(&mut c, other, &org_level).await;
    assert!(
        wrong.is_empty(),
        "from other/one, acme's org ids: {wrong:#?}"
    );

    // An org set is shared, but what a project cites in it is its own episodes only.
    let wrong = not_found_everywhere(
        &mut c,
        two,
        &Foreign {
            episodes: vec![episode.clone()],
            own_set: Some((org_set.clone(), "org_notes".into())),
            ..Default::default()
        },
    )
    .await;
    assert!(
        wrong.is_empty(),
        "acme/two citing acme/one's episode: {wrong:#?}"
    );

    // All or none: an own feature with a foreign one is NOT_FOUND, and the own one stays.
    for at in [two, other] {
        let mine = own[&at].1.clone();
        let status = c
            .delete_features(at, &[mine.clone(), feature.clone()])
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
        assert_eq!(
            c.get_feature(at, &mine).await.unwrap().value,
            "Monday zebra"
        );
    }

    // Ids that exist nowhere are NOT_FOUND from every project, the owner's too.
    for at in [one, two, other] {
        let own_set = match own.get(&at) {
            Some((set, _)) => set.clone(),
            None => project_set.clone(),
        };
        let wrong = not_found_everywhere(
            &mut c,
            at,
            &Foreign::random(Some((own_set, "notes".into()))),
        )
        .await;
        assert!(wrong.is_empty(), "from {at:?}, random ids: {wrong:#?}");
    }

    // What the others list and find: acme's org-level items from acme/two only, and
    // never acme/one's project-level ones.
    let all_sets: BTreeSet<String> = [&project_set, &user_set, &team_set, &org_set, &region_set]
        .into_iter()
        .cloned()
        .collect();
    let org_sets: BTreeSet<String> = [org_set.clone(), region_set.clone()].into();
    let selecting = [("producer_id", "alice"), ("team", "red"), ("region", "eu")];
    for at in [two, other] {
        let shared = at.0 == "acme";
        let visible_sets = if shared {
            org_sets.clone()
        } else {
            BTreeSet::new()
        };
        let visible_features: BTreeSet<String> = if shared {
            org_features.iter().map(|f| f.to_string()).collect()
        } else {
            BTreeSet::new()
        };
        let types: BTreeSet<String> = c.set_types(at).await.into_iter().map(|t| t.id).collect();
        let expected_types: BTreeSet<String> = if shared {
            [region_type.clone()].into()
        } else {
            BTreeSet::new()
        };
        assert_eq!(types, expected_types, "set types seen from {at:?}");
        for select in [&selecting[..], &[][..]] {
            let sets: BTreeSet<String> = c
                .sets(at, select)
                .await
                .into_iter()
                .map(|s| s.id)
                .filter(|id| all_sets.contains(id))
                .collect();
            assert_eq!(
                sets, visible_sets,
                "acme/one's sets seen from {at:?} ({select:?})"
            );
            let listed = ids_of(&c.list_features(at, select, 2).await);
            let found = ids_of(&c.search(at, "zebra", select).await);
            for (how, ids) in [("listed", listed), ("found", found)] {
                let foreign: BTreeSet<String> = ids
                    .iter()
                    .filter(|id| before.features.iter().any(|f| &f.id == *id))
                    .cloned()
                    .collect();
                assert_eq!(
                    foreign, visible_features,
                    "acme/one's features {how} from {at:?} ({select:?})"
                );
            }
        }
        let memories = c
            .memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: at.0.into(),
                project_id: at.1.into(),
                query: "zebra".into(),
                top_k: Some(1000),
                types: vec![MemoryType::Semantic as i32],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let found: BTreeSet<String> = ids_of(&memories.semantic_memory)
            .into_iter()
            .filter(|id| before.features.iter().any(|f| &f.id == id))
            .collect();
        assert_eq!(found, visible_features, "SearchMemories from {at:?}");
    }

    // The shared org items work from acme/two as they do from acme/one.
    assert_eq!(
        c.get_feature(two, &org_feature).await.unwrap().value,
        "a zebra"
    );
    assert_eq!(
        c.get_category(two, &org_category).await.unwrap().tags[0].name,
        "policy"
    );
    assert_eq!(c.templates(two, &region_type).await.unwrap().len(), 1);
    assert_eq!(
        c.category_sets(two, &region_template).await.unwrap(),
        [region_set.as_str()]
    );

    // Nothing in acme/one changed.
    let after = snapshot(
        &mut c,
        one,
        &[
            &feature,
            &user_feature,
            &team_feature,
            &org_feature,
            &region_feature,
        ],
        &[&category, &org_category, &template, &region_template],
        &[&team_type, &region_type],
    )
    .await;
    assert_eq!(after, before);
    assert_eq!(after.got[0].value, "Friday zebra");
    assert_eq!(after.got[0].tag, "process");
    assert_eq!(after.categories[0].tags[0].id, tag);
}

// The model-based property test.

const PROJECTS: usize = 4;
const CATEGORIES: [&str; 2] = ["notes", "facts"];
const TAGS: [&str; 2] = ["likes", "work"];
const NAMES: [&str; 2] = ["colour", "city"];
const VALUES: [&str; 3] = ["red", "Oslo", "blue"];

/// Which set `GetSetId` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum SetKey {
    Org,
    Project,
    User(u8),
    OrgTeam(u8),
    ProjectTeam(u8),
}

impl SetKey {
    fn org_level(self) -> bool {
        matches!(self, SetKey::Org | SetKey::OrgTeam(_))
    }

    fn tags(self) -> Vec<(&'static str, &'static str)> {
        let names = ["alice", "bob"];
        let teams = ["red", "blue"];
        match self {
            SetKey::Org | SetKey::Project => vec![],
            SetKey::User(u) => vec![("producer_id", names[u as usize])],
            SetKey::OrgTeam(t) | SetKey::ProjectTeam(t) => vec![("team", teams[t as usize])],
        }
    }
}

/// Who calls: the project that owns the target, or any project.
#[derive(Debug, Clone, Copy)]
enum Who {
    Owner,
    Any(usize),
}

#[derive(Debug, Clone)]
enum Op {
    GetSetId {
        project: usize,
        key: SetKey,
    },
    AddCategory {
        who: Who,
        set: Index,
        name: usize,
    },
    AddFeature {
        who: Who,
        set: Index,
        /// Into the set's categories and one it does not have.
        category: Index,
        tag: usize,
        name: usize,
        value: usize,
    },
    UpdateFeature {
        who: Who,
        feature: Index,
        value: Option<usize>,
        tag: Option<usize>,
        /// Into the set's categories and one it does not have.
        category: Option<Index>,
    },
    Delete {
        who: Who,
        features: Vec<Index>,
    },
    GetFeature {
        who: Who,
        feature: Index,
    },
    Recreate {
        project: usize,
    },
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![4 => Just(Who::Owner), 1 => (0..PROJECTS).prop_map(Who::Any)]
}

fn get_set_id() -> impl Strategy<Value = Op> {
    let key = prop_oneof![
        Just(SetKey::Org),
        Just(SetKey::Project),
        (0..2u8).prop_map(SetKey::User),
        (0..2u8).prop_map(SetKey::OrgTeam),
        (0..2u8).prop_map(SetKey::ProjectTeam),
    ];
    (0..PROJECTS, key).prop_map(|(project, key)| Op::GetSetId { project, key })
}

fn add_category(who: impl Strategy<Value = Who>) -> impl Strategy<Value = Op> {
    (who, any::<Index>(), 0..CATEGORIES.len()).prop_map(|(who, set, name)| Op::AddCategory {
        who,
        set,
        name,
    })
}

/// A few sets with categories, then anything.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    (
        prop::collection::vec(get_set_id(), 3..7),
        prop::collection::vec(add_category(Just(Who::Owner)), 2..5),
        prop::collection::vec(op(), 22..28),
    )
        .prop_map(|(mut ops, categories, rest)| {
            ops.extend(categories);
            ops.extend(rest);
            ops
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => get_set_id(),
        2 => add_category(who()),
        10 => (
            who(),
            any::<Index>(),
            any::<Index>(),
            0..TAGS.len(),
            0..NAMES.len(),
            0..VALUES.len()
        )
            .prop_map(|(who, set, category, tag, name, value)| Op::AddFeature {
                who, set, category, tag, name, value
            }),
        2 => (
            who(),
            any::<Index>(),
            proptest::option::of(0..VALUES.len()),
            proptest::option::of(0..TAGS.len()),
            proptest::option::weighted(0.3, any::<Index>())
        )
            .prop_map(|(who, feature, value, tag, category)| Op::UpdateFeature {
                who, feature, value, tag, category
            }),
        2 => (who(), prop::collection::vec(any::<Index>(), 1..3))
            .prop_map(|(who, features)| Op::Delete { who, features }),
        2 => (who(), any::<Index>()).prop_map(|(who, feature)| Op::GetFeature { who, feature }),
        1 => (0..PROJECTS).prop_map(|project| Op::Recreate { project }),
    ]
}

/// A set as the model knows it.
#[derive(Debug, Clone)]
struct ModelSet {
    id: String,
    org: usize,
    /// `None` for org-level sets.
    project: Option<usize>,
    user: bool,
    /// The org's or the project's own set (no tags): made again on first use.
    plain: bool,
    exists: bool,
    categories: BTreeSet<String>,
}

impl ModelSet {
    fn visible_to(&self, project: usize) -> bool {
        self.exists && self.org == project / 2 && self.project.is_none_or(|p| p == project)
    }

    /// Whether `project` can add to it: it sees it, or it is that project's own (or its
    /// org's) plain set, which the server makes again on first use.
    fn reachable_by(&self, project: usize) -> bool {
        self.visible_to(project)
            || (self.plain && self.org == project / 2 && self.project.is_none_or(|p| p == project))
    }

    fn has_category(&self, name: &str) -> bool {
        (self.user && name == "profile") || self.categories.contains(name)
    }

    /// A category of the set (when it has one) or one it does not have.
    fn pick_category(set: Option<&ModelSet>, index: &Index) -> &'static str {
        let all = ["notes", "facts", "profile"];
        let (mut names, missing): (Vec<&'static str>, Vec<&'static str>) = all
            .into_iter()
            .partition(|name| set.is_some_and(|s| s.has_category(name)));
        let i = index.index(4 * names.len() + 1) / 4;
        names.extend(missing.first());
        names[i.min(names.len() - 1)]
    }

    /// The project that owns it (for org-level sets, the first of its org).
    fn owner(&self) -> usize {
        self.project.unwrap_or(self.org * 2)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ModelFeature {
    id: String,
    set_id: String,
    category: String,
    tag: String,
    feature: String,
    value: String,
}

impl ModelFeature {
    fn of(f: &pb::SemanticFeature) -> ModelFeature {
        ModelFeature {
            id: f.id.clone(),
            set_id: f.set_id.clone(),
            category: f.category.clone(),
            tag: f.tag.clone(),
            feature: f.feature_name.clone(),
            value: f.value.clone(),
        }
    }
}

#[derive(Default, Debug)]
struct Model {
    /// Every set id seen, with what it is.
    sets: Vec<ModelSet>,
    /// The id `GetSetId` gave for (org, project or none when org-level, key).
    set_ids: HashMap<(usize, Option<usize>, SetKey), String>,
    /// Every feature id issued; `None` once deleted.
    features: Vec<(String, Option<ModelFeature>)>,
}

impl Model {
    fn set(&self, id: &str) -> Option<&ModelSet> {
        self.sets.iter().find(|s| s.id == id)
    }

    fn expected(&self, project: usize) -> Vec<ModelFeature> {
        let mut expected: Vec<ModelFeature> = self
            .features
            .iter()
            .filter_map(|(_, f)| f.clone())
            .filter(|f| self.set(&f.set_id).is_some_and(|s| s.visible_to(project)))
            .collect();
        expected.sort();
        expected
    }

    /// The feature's set, when the feature exists.
    fn feature_set(&self, feature: &Option<ModelFeature>) -> Option<&ModelSet> {
        feature.as_ref().and_then(|f| self.set(&f.set_id))
    }
}

/// One case: fresh orgs on the shared server, the ops applied to it and the model,
/// every project's listing (in pages of `page_size`) compared with the model after each.
async fn run_case(c: &mut Client, case: usize, ops: &[Op], page_size: i32) {
    let orgs = [format!("case{case}a"), format!("case{case}b")];
    let names = ["p0", "p1"];
    let at = |p: usize| At(&orgs[p / 2], names[p % 2]);
    for p in 0..PROJECTS {
        c.create(at(p)).await;
    }
    // Ids that exist nowhere (picked when an index falls past the known ones).
    let phantom_set = format!("mem_project_set_{}", random_hex());
    let phantom_feature = random_uuid();
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let caller = |who: Who, owner: usize| match who {
            Who::Owner => owner,
            Who::Any(p) => p,
        };
        // A known set or feature, or now and then one that exists nowhere.
        let pick = |len: usize, index: &Index| index.index(8 * len + 1) / 8;
        let pick_set = |model: &Model, index: &Index| -> Option<ModelSet> {
            model.sets.get(pick(model.sets.len(), index)).cloned()
        };
        let pick_feature = |model: &Model, index: &Index| -> (String, Option<ModelFeature>) {
            model
                .features
                .get(pick(model.features.len(), index))
                .cloned()
                .unwrap_or_else(|| (phantom_feature.clone(), None))
        };
        let context = format!("case {case} step {step}: {op:?}");
        match op {
            Op::GetSetId { project, key } => {
                let p = *project;
                let id = c
                    .set_id(at(p), key.org_level(), &key.tags())
                    .await
                    .unwrap_or_else(|e| panic!("{context}: {e:?}"));
                let owner = (!key.org_level()).then_some(p);
                let slot = (p / 2, owner, *key);
                if let Some(known) = model.set_ids.get(&slot) {
                    assert_eq!(&id, known, "{context}: set ids are deterministic");
                } else {
                    assert!(
                        !model.set_ids.values().any(|other| other == &id),
                        "{context}: {id} is the id of another set"
                    );
                    model.set_ids.insert(slot, id.clone());
                }
                match model.sets.iter_mut().find(|s| s.id == id) {
                    Some(set) => set.exists = true,
                    None => model.sets.push(ModelSet {
                        id,
                        org: p / 2,
                        project: owner,
                        user: matches!(key, SetKey::User(_)),
                        plain: matches!(key, SetKey::Org | SetKey::Project),
                        exists: true,
                        categories: BTreeSet::new(),
                    }),
                }
            }
            Op::AddCategory { who, set, name } => {
                let target = pick_set(&model, set);
                let set_id = target
                    .as_ref()
                    .map_or(phantom_set.clone(), |s| s.id.clone());
                let p = caller(*who, target.as_ref().map_or(0, ModelSet::owner));
                let name = CATEGORIES[*name];
                let result = c.add_category(at(p), &set_id, name).await;
                let expected = match &target {
                    Some(s) if s.reachable_by(p) && s.categories.contains(name) => {
                        Err(Code::AlreadyExists)
                    }
                    Some(s) if s.reachable_by(p) => Ok(()),
                    _ => Err(Code::NotFound),
                };
                assert_eq!(
                    result.as_ref().map(drop).map_err(Status::code),
                    expected,
                    "{context} (project {p}): {result:?}"
                );
                if result.is_ok() {
                    let s = model.sets.iter_mut().find(|s| s.id == set_id).unwrap();
                    s.exists = true;
                    s.categories.insert(name.to_string());
                }
            }
            Op::AddFeature {
                who,
                set,
                category,
                tag,
                name,
                value,
            } => {
                // Mostly a set with a category, so that features pile up.
                let categorised: Vec<&ModelSet> = model
                    .sets
                    .iter()
                    .filter(|s| s.exists && (s.user || !s.categories.is_empty()))
                    .collect();
                let i = set.index(4 * categorised.len() + model.sets.len() + 1);
                let target = match categorised.get(i / 4) {
                    Some(s) => Some((*s).clone()),
                    None => model.sets.get(i - 4 * categorised.len()).cloned(),
                };
                let set_id = target
                    .as_ref()
                    .map_or(phantom_set.clone(), |s| s.id.clone());
                let p = caller(*who, target.as_ref().map_or(0, ModelSet::owner));
                let (category, tag, name, value) = (
                    ModelSet::pick_category(target.as_ref(), category),
                    TAGS[*tag],
                    NAMES[*name],
                    VALUES[*value],
                );
                let result = c
                    .add_feature(at(p), &set_id, category, tag, name, value, &[])
                    .await;
                // `profile` is built in: a hand-added feature may use it in any set.
                let ok = target.as_ref().is_some_and(|s| {
                    s.reachable_by(p) && (s.has_category(category) || category == "profile")
                });
                match result {
                    Ok(id) => {
                        assert!(ok, "{context} (project {p}): added {id}");
                        // Added by hand: always a new feature, even when the same fact is
                        // there already (only ingestion merges).
                        assert!(
                            !model.features.iter().any(|(known, _)| known == &id),
                            "{context}: {id} reused"
                        );
                        if let Some(s) = model.sets.iter_mut().find(|s| s.id == set_id) {
                            s.exists = true;
                        }
                        model.features.push((
                            id.clone(),
                            Some(ModelFeature {
                                id,
                                set_id,
                                category: category.into(),
                                tag: tag.into(),
                                feature: name.into(),
                                value: value.into(),
                            }),
                        ));
                    }
                    Err(status) => {
                        assert!(!ok, "{context} (project {p}): {status:?}");
                        assert_eq!(status.code(), Code::NotFound, "{context}: {status:?}");
                    }
                }
            }
            Op::UpdateFeature {
                who,
                feature,
                value,
                tag,
                category,
            } => {
                let (id, current) = pick_feature(&model, feature);
                let set = model.feature_set(&current).cloned();
                let p = caller(*who, set.as_ref().map_or(0, ModelSet::owner));
                let value = value.map(|v| VALUES[v]);
                let tag = tag.map(|t| TAGS[t]);
                let category = category
                    .as_ref()
                    .map(|k| ModelSet::pick_category(set.as_ref(), k));
                let result = c
                    .semantic
                    .update_feature(pb::UpdateFeatureRequest {
                        org_id: at(p).0.into(),
                        project_id: at(p).1.into(),
                        feature_id: id.clone(),
                        category_name: category.map(str::to_string),
                        tag: tag.map(str::to_string),
                        value: value.map(str::to_string),
                        ..Default::default()
                    })
                    .await;
                let ok = set
                    .as_ref()
                    .is_some_and(|s| s.visible_to(p) && category.is_none_or(|k| s.has_category(k)));
                match result {
                    Ok(_) => {
                        assert!(ok, "{context} (project {p}): updated");
                        let slot = model.features.iter_mut().find(|(k, _)| k == &id).unwrap();
                        let f = slot.1.as_mut().unwrap();
                        if let Some(v) = value {
                            f.value = v.into();
                        }
                        if let Some(t) = tag {
                            f.tag = t.into();
                        }
                        if let Some(k) = category {
                            f.category = k.into();
                        }
                    }
                    Err(status) => {
                        assert!(!ok, "{context} (project {p}): {status:?}");
                        assert_eq!(status.code(), Code::NotFound, "{context}: {status:?}");
                    }
                }
            }
            Op::Delete { who, features } => {
                let picked: Vec<(String, Option<ModelFeature>)> =
                    features.iter().map(|i| pick_feature(&model, i)).collect();
                let owner = model.feature_set(&picked[0].1).map_or(0, ModelSet::owner);
                let p = caller(*who, owner);
                let ids: Vec<String> = picked.iter().map(|(id, _)| id.clone()).collect();
                let result = c.delete_features(at(p), &ids).await;
                let ok = picked
                    .iter()
                    .all(|(_, f)| model.feature_set(f).is_some_and(|s| s.visible_to(p)));
                let distinct: BTreeSet<&String> = ids.iter().collect();
                match result {
                    Ok(count) => {
                        assert!(ok, "{context} (project {p}): deleted {count}");
                        assert_eq!(count as usize, distinct.len(), "{context}");
                        for (id, slot) in &mut model.features {
                            if distinct.contains(id) {
                                *slot = None;
                            }
                        }
                    }
                    Err(status) => {
                        assert!(!ok, "{context} (project {p}): {status:?}");
                        assert_eq!(status.code(), Code::NotFound, "{context}: {status:?}");
                    }
                }
            }
            Op::GetFeature { who, feature } => {
                let (id, current) = pick_feature(&model, feature);
                let set = model.feature_set(&current);
                let p = caller(*who, set.map_or(0, ModelSet::owner));
                let visible = set.is_some_and(|s| s.visible_to(p));
                match c.get_feature(at(p), &id).await {
                    Ok(got) => {
                        assert!(visible, "{context} (project {p}): got {got:?}");
                        assert_eq!(Some(ModelFeature::of(&got)), current, "{context}");
                    }
                    Err(status) => {
                        assert!(!visible, "{context} (project {p}): {status:?}");
                        assert_eq!(status.code(), Code::NotFound, "{context}: {status:?}");
                    }
                }
            }
            Op::Recreate { project } => {
                let p = *project;
                c.delete_project(at(p)).await;
                c.create(at(p)).await;
                // Its project and user sets went with their features; org sets stay.
                let gone: BTreeSet<String> = model
                    .sets
                    .iter_mut()
                    .filter(|s| s.project == Some(p))
                    .map(|s| {
                        s.exists = false;
                        s.categories.clear();
                        s.id.clone()
                    })
                    .collect();
                for (_, slot) in &mut model.features {
                    if slot.as_ref().is_some_and(|f| gone.contains(&f.set_id)) {
                        *slot = None;
                    }
                }
            }
        }
        for p in 0..PROJECTS {
            let mut listed: Vec<ModelFeature> = c
                .list_features(at(p), &[], page_size)
                .await
                .iter()
                .map(ModelFeature::of)
                .collect();
            listed.sort();
            assert_eq!(
                listed,
                model.expected(p),
                "{context}: what project {p} ({:?}) lists",
                at(p)
            );
        }
    }
}

#[test]
fn random_semantic_operations_match_a_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(InProcess::start());
    let c = runtime.block_on(client(&server));
    let cases = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 16,
        failure_persistence: None,
        ..Config::default()
    });
    // Small pages, so that listing a project takes several.
    let result = runner.run(&(ops(), 1..=7i32), |(ops, page_size)| {
        let case = cases.fetch_add(1, Ordering::SeqCst);
        let mut c = c.clone();
        runtime.block_on(run_case(&mut c, case, &ops, page_size));
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
}
