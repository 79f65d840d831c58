//! Pages of projects' logs shared by their watchers: watchers at one place in a log
//! (all caught up, the usual case) read the next page from the store once between them,
//! not once each (a round trip each on PostgreSQL).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::error::{Error, Result};
use crate::model::{ChangeSeq, ProjectHandle};
use crate::store::{MemoryChanges, Store};

/// Log entries read per page.
pub(super) const PAGE: usize = 256;
/// Pages kept for watchers still to come (the most recently asked for).
const KEPT: usize = 32;

type Page = Arc<OnceCell<Arc<MemoryChanges>>>;

pub struct Pages {
    store: Arc<dyn Store>,
    recent: Mutex<VecDeque<((ProjectHandle, ChangeSeq), Page)>>,
}

/// Why a read is not kept: the store failed, or it found nothing (the log may yet
/// grow past that place, so the next watcher must look again).
enum Uncached {
    Failed(Error),
    Empty(MemoryChanges),
}

impl Pages {
    pub fn new(store: Arc<dyn Store>) -> Pages {
        Pages {
            store,
            recent: Mutex::new(VecDeque::new()),
        }
    }

    /// The page of `project`'s log after change `after`, read once for every watcher
    /// asking for it while it is kept. Entries once logged never change, so a page read
    /// earlier holds only true entries (bodies as they were when it was read).
    pub async fn read(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
    ) -> Result<Arc<MemoryChanges>> {
        let page = {
            let mut recent = self.recent.lock().expect("pages lock");
            match recent.iter().find(|(at, _)| *at == (project, after)) {
                Some((_, page)) => page.clone(),
                None => {
                    if recent.len() == KEPT {
                        recent.pop_front();
                    }
                    let page = Page::default();
                    recent.push_back(((project, after), page.clone()));
                    page
                }
            }
        };
        let read = page
            .get_or_try_init(|| async {
                let read = self
                    .store
                    .memory_changes(project, after, PAGE)
                    .await
                    .map_err(Uncached::Failed)?;
                match &read {
                    MemoryChanges::Read { changes, through }
                        if changes.is_empty() && *through <= after =>
                    {
                        Err(Uncached::Empty(read))
                    }
                    _ => Ok(Arc::new(read)),
                }
            })
            .await;
        match read {
            Ok(page) => Ok(page.clone()),
            Err(Uncached::Empty(read)) => Ok(Arc::new(read)),
            Err(Uncached::Failed(err)) => Err(err),
        }
    }
}
