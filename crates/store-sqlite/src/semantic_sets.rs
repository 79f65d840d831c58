//! SQL for semantic set types, sets, categories, tags and disabled default categories.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::error::storage_error;
use super::helpers::{bad_column, bump_sets, id_array, is_constraint, now_micros};
use super::projects;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{
    CategoryId, ProjectConfig, ProjectHandle, ProjectKey, SetId, SetTypeId, TagId,
};
use memmachine_core::store::{
    Category, CategoryOwner, NewCategory, NewSet, NewSetType, SetConfig, SetKind, SetRow, SetType,
    Tag,
};

// Set types.

pub(super) const SET_TYPE_COLUMNS: &str =
    "id, public_id, org_id, project, is_org_level, name, description, tags, created_at";

pub(super) fn set_type_from_row(row: &Row<'_>) -> rusqlite::Result<SetType> {
    let tags: String = row.get(7)?;
    Ok(SetType {
        internal_id: SetTypeId::from_raw(row.get(0)?),
        id: row.get(1)?,
        org_id: row.get(2)?,
        project: row.get::<_, Option<i64>>(3)?.map(ProjectHandle::from_raw),
        is_org_level: row.get(4)?,
        name: row.get(5)?,
        description: row.get(6)?,
        tags: serde_json::from_str(&tags).map_err(|err| bad_column(7, err))?,
        created_at_micros: row.get(8)?,
    })
}

/// The set types a project sees: its own and its org's org-level ones.
fn visible_set_types(conn: &Connection, project: i64, org_id: &str) -> Result<Vec<SetType>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {SET_TYPE_COLUMNS} FROM semantic_set_types
             WHERE project = ?1 OR (org_id = ?2 AND is_org_level = 1) ORDER BY id"
        ))
        .map_err(storage_error)?;
    stmt.query_map(params![project, org_id], set_type_from_row)
        .and_then(|rows| rows.collect())
        .map_err(storage_error)
}

pub(super) fn list_set_types(conn: &Connection, key: &ProjectKey) -> Result<Vec<SetType>> {
    let project = projects::require(conn, key)?;
    visible_set_types(conn, project, &key.org_id)
}

pub(super) fn create_set_type(
    conn: &Connection,
    key: &ProjectKey,
    new: &NewSetType,
) -> Result<SetType> {
    let project = projects::require(conn, key)?;
    let mut tags = new.tags.clone();
    tags.sort();
    tags.dedup();
    if let Some(existing) = visible_set_types(conn, project, &key.org_id)?
        .into_iter()
        .find(|t| t.is_org_level == new.is_org_level && t.tags == tags)
    {
        return Err(Error::AlreadyExists(format!(
            "set type {} already has these metadata tags at this level",
            existing.id
        )));
    }
    let tags = serde_json::to_string(&tags)
        .map_err(|err| Error::Internal(format!("encoding tags: {err}")))?;
    conn.prepare_cached(&format!(
        "INSERT INTO semantic_set_types (public_id, org_id, project, is_org_level, name,
             description, tags, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING {SET_TYPE_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                new.id,
                key.org_id,
                (!new.is_org_level).then_some(project),
                new.is_org_level,
                new.name,
                new.description,
                tags,
                now_micros()
            ],
            set_type_from_row,
        )
    })
    .map_err(|err| {
        if is_constraint(&err) {
            Error::AlreadyExists(format!("set type {} already exists", new.id))
        } else {
            storage_error(err)
        }
    })
}

pub(super) fn delete_set_type(conn: &Connection, internal_id: i64) -> Result<bool> {
    conn.prepare_cached("DELETE FROM semantic_set_types WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([internal_id]))
        .map(|n| n > 0)
        .map_err(storage_error)
}

// Sets.

const SET_COLUMNS: &str = "s.id, s.set_id, s.org_id, s.project, s.kind, s.set_type, s.tags, s.embedder, s.llm, \
     s.created_at";

fn set_from_row(row: &Row<'_>) -> rusqlite::Result<SetRow> {
    let kind: String = row.get(4)?;
    let tags: String = row.get(6)?;
    Ok(SetRow {
        internal_id: SetId::from_raw(row.get(0)?),
        set_id: row.get(1)?,
        org_id: row.get(2)?,
        project: row.get::<_, Option<i64>>(3)?.map(ProjectHandle::from_raw),
        kind: SetKind::parse(&kind)
            .ok_or_else(|| bad_column(4, format!("unknown set kind {kind:?}")))?,
        set_type: row.get::<_, Option<i64>>(5)?.map(SetTypeId::from_raw),
        tags: serde_json::from_str::<BTreeMap<String, String>>(&tags)
            .map_err(|err| bad_column(6, err))?,
        config: SetConfig {
            embedder: row.get(7)?,
            llm: row.get(8)?,
        },
        created_at_micros: row.get(9)?,
    })
}

pub(super) fn find_set(conn: &Connection, set_id: &str) -> Result<Option<SetRow>> {
    conn.prepare_cached(&format!(
        "SELECT {SET_COLUMNS} FROM semantic_sets s WHERE s.set_id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([set_id], set_from_row).optional())
    .map_err(storage_error)
}

pub(super) fn set_by_id(conn: &Connection, internal_id: i64) -> Result<Option<SetRow>> {
    conn.prepare_cached(&format!(
        "SELECT {SET_COLUMNS} FROM semantic_sets s WHERE s.id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([internal_id], set_from_row).optional())
    .map_err(storage_error)
}

/// The set's org, or `NotFound` when the set is gone.
pub(super) fn require_set(conn: &Connection, internal_id: i64) -> Result<SetRow> {
    set_by_id(conn, internal_id)?
        .ok_or_else(|| Error::NotFound(format!("feature set {internal_id} does not exist")))
}

/// Creates the sets that do not exist (org-level ones without a project) in the
/// project `project` of `org_id`; returns all of them, in input order.
pub(super) fn ensure_sets(
    conn: &Connection,
    project: i64,
    org_id: &str,
    sets: &[NewSet],
) -> Result<Vec<SetRow>> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO semantic_sets (set_id, org_id, project, kind, set_type, tags,
                 created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (set_id) DO NOTHING",
        )
        .map_err(storage_error)?;
    let now = now_micros();
    let mut rows = Vec::with_capacity(sets.len());
    for set in sets {
        let tags = serde_json::to_string(&set.tags)
            .map_err(|err| Error::Internal(format!("encoding set tags: {err}")))?;
        insert
            .execute(params![
                set.set_id,
                org_id,
                (!set.org_level).then_some(project),
                set.kind.as_str(),
                set.set_type.map(SetTypeId::raw),
                tags,
                now
            ])
            .map_err(storage_error)?;
        rows.push(
            find_set(conn, &set.set_id)?
                .ok_or_else(|| Error::Internal("an ensured set vanished".into()))?,
        );
    }
    Ok(rows)
}

pub(super) fn ensure_sets_of(
    conn: &Connection,
    key: &ProjectKey,
    sets: &[NewSet],
) -> Result<Vec<SetRow>> {
    let project = projects::require(conn, key)?;
    ensure_sets(conn, project, &key.org_id, sets)
}

pub(super) fn list_sets(conn: &Connection, key: &ProjectKey) -> Result<Vec<SetRow>> {
    let project = projects::require(conn, key)?;
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {SET_COLUMNS} FROM semantic_sets s
             WHERE s.project = ?1 OR (s.project IS NULL AND s.org_id = ?2) ORDER BY s.set_id"
        ))
        .map_err(storage_error)?;
    stmt.query_map(params![project, key.org_id], set_from_row)
        .and_then(|rows| rows.collect())
        .map_err(storage_error)
}

pub(super) fn sets_of_type(conn: &Connection, set_type: i64) -> Result<Vec<SetRow>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {SET_COLUMNS} FROM semantic_sets s WHERE s.set_type = ?1 ORDER BY s.set_id"
        ))
        .map_err(storage_error)?;
    stmt.query_map([set_type], set_from_row)
        .and_then(|rows| rows.collect())
        .map_err(storage_error)
}

pub(super) fn configure_set(conn: &Connection, set: i64, config: &SetConfig) -> Result<()> {
    let changed = conn
        .prepare_cached("UPDATE semantic_sets SET embedder = ?2, llm = ?3 WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute(params![set, config.embedder, config.llm]))
        .map_err(storage_error)?;
    if changed == 0 {
        return Err(Error::NotFound(format!("feature set {set} does not exist")));
    }
    Ok(())
}

pub(super) fn project_config(conn: &Connection, project: i64) -> Result<Option<ProjectConfig>> {
    conn.prepare_cached("SELECT embedder, reranker FROM projects WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([project], |row| {
                Ok(ProjectConfig {
                    embedder: row.get(0)?,
                    reranker: row.get(1)?,
                })
            })
            .optional()
        })
        .map_err(storage_error)
}

// Categories and tags.

const CATEGORY_COLUMNS: &str = "id, public_id, set_ref, set_type, name, prompt, description";

fn category_from_row(row: &Row<'_>) -> rusqlite::Result<Category> {
    let set: Option<i64> = row.get(2)?;
    let set_type: Option<i64> = row.get(3)?;
    let owner = match (set, set_type) {
        (Some(set), _) => CategoryOwner::Set(SetId::from_raw(set)),
        (None, Some(set_type)) => CategoryOwner::SetType(SetTypeId::from_raw(set_type)),
        (None, None) => return Err(bad_column(2, "a category without an owner")),
    };
    Ok(Category {
        internal_id: CategoryId::from_raw(row.get(0)?),
        id: row.get(1)?,
        owner,
        name: row.get(4)?,
        prompt: row.get(5)?,
        description: row.get(6)?,
        tags: Vec::new(),
    })
}

const TAG_COLUMNS: &str = "id, public_id, category, name, description";

fn tag_from_row(row: &Row<'_>) -> rusqlite::Result<Tag> {
    Ok(Tag {
        internal_id: TagId::from_raw(row.get(0)?),
        id: row.get(1)?,
        category: CategoryId::from_raw(row.get(2)?),
        name: row.get(3)?,
        description: row.get(4)?,
    })
}

/// Fills in the categories' tags, in the order they were added.
fn with_tags(conn: &Connection, mut categories: Vec<Category>) -> Result<Vec<Category>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {TAG_COLUMNS} FROM semantic_tags WHERE category = ?1 ORDER BY id"
        ))
        .map_err(storage_error)?;
    for category in &mut categories {
        category.tags = stmt
            .query_map([category.internal_id.raw()], tag_from_row)
            .and_then(|rows| rows.collect())
            .map_err(storage_error)?;
    }
    Ok(categories)
}

fn owner_columns(owner: CategoryOwner) -> (Option<i64>, Option<i64>) {
    match owner {
        CategoryOwner::Set(set) => (Some(set.raw()), None),
        CategoryOwner::SetType(set_type) => (None, Some(set_type.raw())),
    }
}

pub(super) fn add_category(
    conn: &Connection,
    owner: CategoryOwner,
    new: &NewCategory,
) -> Result<Category> {
    let (set, set_type) = owner_columns(owner);
    let owner_exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM semantic_sets WHERE id = ?1)
                 OR EXISTS (SELECT 1 FROM semantic_set_types WHERE id = ?2)",
            params![set, set_type],
            |row| row.get(0),
        )
        .map_err(storage_error)?;
    if !owner_exists {
        return Err(Error::NotFound(
            "the category's owner does not exist".into(),
        ));
    }
    let taken: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM semantic_categories
                 WHERE (set_ref = ?1 OR set_type = ?2) AND name = ?3 COLLATE NOCASE)",
        )
        .and_then(|mut stmt| stmt.query_row(params![set, set_type, new.name], |row| row.get(0)))
        .map_err(storage_error)?;
    if taken {
        return Err(Error::AlreadyExists(format!(
            "a category named {:?} already exists there",
            new.name
        )));
    }
    conn.prepare_cached(&format!(
        "INSERT INTO semantic_categories (public_id, set_ref, set_type, name, prompt,
             description)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING {CATEGORY_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![new.id, set, set_type, new.name, new.prompt, new.description],
            category_from_row,
        )
    })
    .map_err(|err| {
        if is_constraint(&err) {
            Error::AlreadyExists(format!("category {} already exists", new.id))
        } else {
            storage_error(err)
        }
    })
}

pub(super) fn find_category(conn: &Connection, id: &str) -> Result<Option<Category>> {
    let found = conn
        .prepare_cached(&format!(
            "SELECT {CATEGORY_COLUMNS} FROM semantic_categories WHERE public_id = ?1"
        ))
        .and_then(|mut stmt| stmt.query_row([id], category_from_row).optional())
        .map_err(storage_error)?;
    Ok(with_tags(conn, found.into_iter().collect())?.pop())
}

pub(super) fn categories_of(conn: &Connection, owners: &[CategoryOwner]) -> Result<Vec<Category>> {
    let (mut sets, mut set_types) = (Vec::new(), Vec::new());
    for owner in owners {
        match *owner {
            CategoryOwner::Set(set) => sets.push(set.raw()),
            CategoryOwner::SetType(set_type) => set_types.push(set_type.raw()),
        }
    }
    let categories = conn
        .prepare_cached(&format!(
            "SELECT {CATEGORY_COLUMNS} FROM semantic_categories
             WHERE set_ref IN rarray(?1) OR set_type IN rarray(?2) ORDER BY id"
        ))
        .and_then(|mut stmt| {
            stmt.query_map(
                params![id_array(&sets), id_array(&set_types)],
                category_from_row,
            )?
            .collect()
        })
        .map_err(storage_error)?;
    with_tags(conn, categories)
}

/// Deletes the category (its tags cascade) and the features of `sets` in a category
/// of its name (compared without regard to ASCII case, as the domain compares names).
pub(super) fn delete_category(conn: &Connection, internal_id: i64, sets: &[i64]) -> Result<()> {
    let name: Option<String> = conn
        .prepare_cached("SELECT name FROM semantic_categories WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([internal_id], |row| row.get(0)).optional())
        .map_err(storage_error)?;
    let Some(name) = name else {
        return Ok(());
    };
    conn.prepare_cached(
        "DELETE FROM semantic_features
         WHERE set_ref IN rarray(?1) AND category = ?2 COLLATE NOCASE",
    )
    .and_then(|mut stmt| stmt.execute(params![id_array(sets), name]))
    .map_err(storage_error)?;
    conn.prepare_cached("DELETE FROM semantic_categories WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([internal_id]))
        .map_err(storage_error)?;
    bump_sets(conn, sets)
}

pub(super) fn disable_category(conn: &Connection, set: i64, name: &str) -> Result<()> {
    require_set(conn, set)?;
    conn.prepare_cached("INSERT OR IGNORE INTO semantic_disabled (set_ref, name) VALUES (?1, ?2)")
        .and_then(|mut stmt| stmt.execute(params![set, name]))
        .map_err(storage_error)?;
    Ok(())
}

pub(super) fn disabled_categories(conn: &Connection, set: i64) -> Result<Vec<String>> {
    conn.prepare_cached("SELECT name FROM semantic_disabled WHERE set_ref = ?1 ORDER BY name")
        .and_then(|mut stmt| stmt.query_map([set], |row| row.get(0))?.collect())
        .map_err(storage_error)
}

pub(super) fn add_tag(
    conn: &Connection,
    category: i64,
    id: &str,
    name: &str,
    description: &str,
) -> Result<Tag> {
    let exists: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM semantic_categories WHERE id = ?1)")
        .and_then(|mut stmt| stmt.query_row([category], |row| row.get(0)))
        .map_err(storage_error)?;
    if !exists {
        return Err(Error::NotFound(format!(
            "category {category} does not exist"
        )));
    }
    let taken: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM semantic_tags
                 WHERE category = ?1 AND name = ?2 COLLATE NOCASE)",
        )
        .and_then(|mut stmt| stmt.query_row(params![category, name], |row| row.get(0)))
        .map_err(storage_error)?;
    if taken {
        return Err(Error::AlreadyExists(format!(
            "the category already has a tag named {name:?}"
        )));
    }
    conn.prepare_cached(&format!(
        "INSERT INTO semantic_tags (public_id, category, name, description)
         VALUES (?1, ?2, ?3, ?4) RETURNING {TAG_COLUMNS}"
    ))
    .and_then(|mut stmt| stmt.query_row(params![id, category, name, description], tag_from_row))
    .map_err(|err| {
        if is_constraint(&err) {
            Error::AlreadyExists(format!("tag {id} already exists"))
        } else {
            storage_error(err)
        }
    })
}

pub(super) fn find_tag(conn: &Connection, id: &str) -> Result<Option<Tag>> {
    conn.prepare_cached(&format!(
        "SELECT {TAG_COLUMNS} FROM semantic_tags WHERE public_id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([id], tag_from_row).optional())
    .map_err(storage_error)
}

pub(super) fn delete_tag(conn: &Connection, internal_id: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM semantic_tags WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([internal_id]))
        .map_err(storage_error)?;
    Ok(())
}
