//! The questions, asked four ways each, and the recall of every ranked list.

use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use tonic::transport::Channel;

use super::conversations::{ORG, Project};
use super::options::Args;
use super::outcome::Run;
use super::scoring::{
    List, cited_turns, episode_turns, interleave, ranked_turns, recall_by_features, response_order,
};
use crate::support::Result;
use crate::support::locomo::{Conversation, recall_at};
use crate::support::server::Server;

/// Asks every question of the conversation four ways and scores the lists.
pub async fn ask(
    args: &Args,
    channel: &Channel,
    conversation: &Conversation,
    project: &Project,
    ks: &[usize],
    server: &Server,
    run: &mut Run,
) -> Result<()> {
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let mut memories = MemoryServiceClient::new(channel.clone());
    let dia = &project.dia;
    for question in &conversation.questions {
        let features = semantic
            .search_features(pb::SearchFeaturesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchFeatures failed", err))?
            .into_inner()
            .features;
        let episodic = memories
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![pb::MemoryType::Episodic as i32],
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchMemories (episodic) failed", err))?
            .into_inner();
        let both = memories
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![
                    pb::MemoryType::Episodic as i32,
                    pb::MemoryType::Semantic as i32,
                ],
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchMemories (episodic+semantic) failed", err))?
            .into_inner();
        let ranked = memories
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![
                    pb::MemoryType::Episodic as i32,
                    pb::MemoryType::Semantic as i32,
                ],
                rank_together: true,
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchMemories (rank_together) failed", err))?
            .into_inner();

        let evidence = &question.evidence;
        let category = question.category;
        let mut unmapped = 0;
        let semantic_turns = cited_turns(&features, dia, &mut unmapped);
        let both_episodes = episode_turns(&both);
        let both_features = &both.semantic_memory;
        let mut ignored = 0;
        let lists: [(List, Vec<f64>); 7] = [
            (
                List::Episodic,
                recall_at(evidence, &episode_turns(&episodic), ks),
            ),
            (
                List::SemanticTurns,
                recall_at(evidence, &semantic_turns, ks),
            ),
            (
                List::SemanticFeatures,
                recall_by_features(evidence, &features, dia, ks),
            ),
            (
                List::CombinedResponse,
                recall_at(
                    evidence,
                    &response_order(&both_episodes, both_features, dia, &mut ignored),
                    ks,
                ),
            ),
            (
                List::CombinedInterleaved,
                recall_at(
                    evidence,
                    &interleave(&both_episodes, both_features, dia, &mut ignored),
                    ks,
                ),
            ),
            (
                List::CombinedRanked,
                recall_at(evidence, &ranked_turns(&ranked, dia, &mut ignored), ks),
            ),
            (List::CombinedAll, {
                let all = response_order(&both_episodes, both_features, dia, &mut ignored);
                run.combined_all_turns += all.len();
                recall_at(evidence, &all, &[usize::MAX])
            }),
        ];
        for (list, recalls) in lists {
            run.scores.entry(list).or_default().add(category, &recalls);
        }
        run.questions += 1;
        run.features_returned += features.len();
        run.no_features += usize::from(features.is_empty());
        run.semantic_turns_at_top_k += semantic_turns.len();
        run.unmapped_citations += unmapped;
    }
    Ok(())
}
