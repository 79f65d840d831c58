//! `memmachine projects list|create|get|delete|count`.

use clap::Subcommand;
use serde_json::json;

use super::connect::Client;
use super::output::{Table, out, print_json, project_json, time};
use super::{CliError, ClientArgs};
use memmachine_proto::v2 as pb;

#[derive(Subcommand, Debug)]
pub enum ProjectsCommand {
    /// The projects of --org, or of every org the key reaches when --org is not given
    List,
    /// Create a project in --org
    Create {
        /// The project's id
        id: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Show a project [default: --project]
    Get { id: Option<String> },
    /// Delete a project and every memory in it
    Delete { id: String },
    /// The number of episodes a project holds [default: --project]
    Count { id: Option<String> },
}

pub async fn run(args: &ClientArgs, command: ProjectsCommand) -> Result<(), CliError> {
    let client = Client::connect(args).await?;
    let org_id = client.org.clone();
    let chosen = |id: Option<String>| id.unwrap_or_else(|| client.project.clone());
    let name = |project: &str| format!("{}/{project}", or_universal(&org_id));
    match command {
        ProjectsCommand::List => {
            let mut projects = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .projects()
                    .list_projects(client.request(pb::ListProjectsRequest {
                        org_id: args.org.clone(),
                        page_size: Some(1000),
                        page_token,
                    }))
                    .await?
                    .into_inner();
                projects.extend(page.projects);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            if args.json {
                return print_json(&json!({
                    "projects": projects.iter().map(project_json).collect::<Vec<_>>()
                }));
            }
            let mut table = Table::new(&["ORG", "PROJECT", "CREATED", "DESCRIPTION"]);
            for p in &projects {
                table.row(vec![
                    p.org_id.clone(),
                    p.project_id.clone(),
                    time(&p.created_at),
                    p.description.clone(),
                ]);
            }
            table.print()
        }
        ProjectsCommand::Create { id, description } => {
            let project = client
                .projects()
                .create_project(client.request_for(
                    &id,
                    pb::CreateProjectRequest {
                        org_id: org_id.clone(),
                        project_id: id.clone(),
                        description,
                        config: None,
                    },
                ))
                .await?
                .into_inner()
                .project
                .unwrap_or_default();
            if args.json {
                return print_json(&project_json(&project));
            }
            out(format!("created project {}", name(&id)))
        }
        ProjectsCommand::Get { id } => {
            let id = chosen(id);
            let project = client
                .projects()
                .get_project(client.request_for(
                    &id,
                    pb::GetProjectRequest {
                        org_id: org_id.clone(),
                        project_id: id.clone(),
                    },
                ))
                .await?
                .into_inner()
                .project
                .unwrap_or_default();
            if args.json {
                return print_json(&project_json(&project));
            }
            let config = project.config.clone().unwrap_or_default();
            let or_default = |s: String| {
                if s.is_empty() {
                    "(server default)".into()
                } else {
                    s
                }
            };
            out(format!("org:         {}", project.org_id))?;
            out(format!("project:     {}", project.project_id))?;
            out(format!("description: {}", project.description))?;
            out(format!("created:     {}", time(&project.created_at)))?;
            out(format!("embedder:    {}", or_default(config.embedder)))?;
            out(format!("reranker:    {}", or_default(config.reranker)))
        }
        ProjectsCommand::Delete { id } => {
            client
                .projects()
                .delete_project(client.request_for(
                    &id,
                    pb::DeleteProjectRequest {
                        org_id: org_id.clone(),
                        project_id: id.clone(),
                    },
                ))
                .await?;
            if args.json {
                return print_json(&json!({"deleted": name(&id)}));
            }
            out(format!("deleted project {}", name(&id)))
        }
        ProjectsCommand::Count { id } => {
            let id = chosen(id);
            let count = client
                .projects()
                .get_episode_count(client.request_for(
                    &id,
                    pb::GetEpisodeCountRequest {
                        org_id: org_id.clone(),
                        project_id: id.clone(),
                    },
                ))
                .await?
                .into_inner()
                .count;
            if args.json {
                return print_json(&json!({"count": count}));
            }
            out(format!("episodes: {count}"))
        }
    }
}

fn or_universal(id: &str) -> &str {
    if id.is_empty() { "universal" } else { id }
}
