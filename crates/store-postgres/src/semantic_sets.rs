//! SQL for semantic set types, sets, categories, tags and disabled default categories.
//! Names compare without regard to ASCII case (`lower(name COLLATE "C")`), as SQLite's
//! `NOCASE` does.

use std::collections::BTreeMap;

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::error::db_error;
use super::helpers::{bad_column, bump_sets, is_unique_violation, lock_org, now_micros};
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

pub(super) fn set_type_from_row(row: &PgRow) -> sqlx::Result<SetType> {
    let tags: String = row.try_get(7)?;
    Ok(SetType {
        internal_id: SetTypeId::from_raw(row.try_get(0)?),
        id: row.try_get(1)?,
        org_id: row.try_get(2)?,
        project: row
            .try_get::<Option<i64>, _>(3)?
            .map(ProjectHandle::from_raw),
        is_org_level: row.try_get(4)?,
        name: row.try_get(5)?,
        description: row.try_get(6)?,
        tags: serde_json::from_str(&tags).map_err(|err| bad_column(7, err))?,
        created_at_micros: row.try_get(8)?,
    })
}

/// The set types a project sees: its own and its org's org-level ones.
async fn visible_set_types(
    conn: &mut PgConnection,
    project: i64,
    org_id: &str,
) -> Result<Vec<SetType>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SET_TYPE_COLUMNS} FROM semantic_set_types
         WHERE org_id = $2 AND (project = $1 OR is_org_level) ORDER BY id"
    )))
    .bind(project)
    .bind(org_id)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(set_type_from_row)
        .collect::<sqlx::Result<_>>()
        .map_err(db_error)
}

pub(super) async fn list_set_types(
    conn: &mut PgConnection,
    key: &ProjectKey,
) -> Result<Vec<SetType>> {
    let project = projects::require(&mut *conn, key).await?;
    visible_set_types(conn, project, &key.org_id).await
}

pub(super) async fn create_set_type(
    tx: &mut PgConnection,
    key: &ProjectKey,
    new: &NewSetType,
) -> Result<SetType> {
    let project = projects::require(&mut *tx, key).await?;
    // One creator per org at a time, so the check below holds until commit.
    lock_org(&mut *tx, &key.org_id).await?;
    let mut tags = new.tags.clone();
    tags.sort();
    tags.dedup();
    if let Some(existing) = visible_set_types(&mut *tx, project, &key.org_id)
        .await?
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
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO semantic_set_types (public_id, org_id, project, is_org_level, name,
             description, tags, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {SET_TYPE_COLUMNS}"
    )))
    .bind(&new.id)
    .bind(&key.org_id)
    .bind((!new.is_org_level).then_some(project))
    .bind(new.is_org_level)
    .bind(&new.name)
    .bind(&new.description)
    .bind(&tags)
    .bind(now_micros())
    .fetch_one(&mut *tx)
    .await
    .map_err(|err| {
        if is_unique_violation(&err) {
            Error::AlreadyExists(format!("set type {} already exists", new.id))
        } else {
            db_error(err)
        }
    })?;
    set_type_from_row(&row).map_err(db_error)
}

pub(super) async fn delete_set_type(tx: &mut PgConnection, internal_id: i64) -> Result<bool> {
    let deleted = sqlx::query("DELETE FROM semantic_set_types WHERE id = $1")
        .bind(internal_id)
        .execute(tx)
        .await
        .map_err(db_error)?
        .rows_affected();
    Ok(deleted > 0)
}

// Sets.

const SET_COLUMNS: &str = "s.id, s.set_id, s.org_id, s.project, s.kind, s.set_type, s.tags, \
     s.embedder, s.llm, s.created_at";

pub(super) fn set_from_row(row: &PgRow, at: usize) -> sqlx::Result<SetRow> {
    let kind: String = row.try_get(at + 4)?;
    let tags: String = row.try_get(at + 6)?;
    Ok(SetRow {
        internal_id: SetId::from_raw(row.try_get(at)?),
        set_id: row.try_get(at + 1)?,
        org_id: row.try_get(at + 2)?,
        project: row
            .try_get::<Option<i64>, _>(at + 3)?
            .map(ProjectHandle::from_raw),
        kind: SetKind::parse(&kind)
            .ok_or_else(|| bad_column(at + 4, format!("unknown set kind {kind:?}")))?,
        set_type: row
            .try_get::<Option<i64>, _>(at + 5)?
            .map(SetTypeId::from_raw),
        tags: serde_json::from_str::<BTreeMap<String, String>>(&tags)
            .map_err(|err| bad_column(at + 6, err))?,
        config: SetConfig {
            embedder: row.try_get(at + 7)?,
            llm: row.try_get(at + 8)?,
        },
        created_at_micros: row.try_get(at + 9)?,
    })
}

async fn sets_where(
    conn: &mut PgConnection,
    condition: &str,
    bind: impl FnOnce(
        sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Vec<SetRow>> {
    let sql = format!("SELECT {SET_COLUMNS} FROM semantic_sets s WHERE {condition}");
    let rows = bind(sqlx::query(sqlx::AssertSqlSafe(sql)))
        .fetch_all(conn)
        .await
        .map_err(db_error)?;
    rows.iter()
        .map(|row| set_from_row(row, 0))
        .collect::<sqlx::Result<_>>()
        .map_err(db_error)
}

pub(super) async fn find_set(conn: &mut PgConnection, set_id: &str) -> Result<Option<SetRow>> {
    let set_id = set_id.to_string();
    // Set ids are unique per org (each names its org); the oldest, should two orgs
    // share one.
    Ok(
        sets_where(conn, "s.set_id = $1 ORDER BY s.id LIMIT 1", |q| {
            q.bind(set_id)
        })
        .await?
        .pop(),
    )
}

pub(super) async fn set_by_id(conn: &mut PgConnection, internal_id: i64) -> Result<Option<SetRow>> {
    Ok(sets_where(conn, "s.id = $1", |q| q.bind(internal_id))
        .await?
        .pop())
}

/// The set, or `NotFound` when it is gone.
pub(super) async fn require_set(conn: &mut PgConnection, internal_id: i64) -> Result<SetRow> {
    set_by_id(conn, internal_id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("feature set {internal_id} does not exist")))
}

/// Creates the sets that do not exist (org-level ones without a project) in the
/// project `project` of `org_id`; returns all of them, in input order.
pub(super) async fn ensure_sets(
    tx: &mut PgConnection,
    project: i64,
    org_id: &str,
    sets: &[NewSet],
) -> Result<Vec<SetRow>> {
    let now = now_micros();
    let mut rows = Vec::with_capacity(sets.len());
    for set in sets {
        let tags = serde_json::to_string(&set.tags)
            .map_err(|err| Error::Internal(format!("encoding set tags: {err}")))?;
        sqlx::query(
            "INSERT INTO semantic_sets (set_id, org_id, project, kind, set_type, tags, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (org_id, set_id) DO NOTHING",
        )
        .bind(&set.set_id)
        .bind(org_id)
        .bind((!set.org_level).then_some(project))
        .bind(set.kind.as_str())
        .bind(set.set_type.map(SetTypeId::raw))
        .bind(&tags)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let set_id = set.set_id.clone();
        let org = org_id.to_string();
        rows.push(
            sets_where(&mut *tx, "s.org_id = $1 AND s.set_id = $2", |q| {
                q.bind(org).bind(set_id)
            })
            .await?
            .pop()
            .ok_or_else(|| Error::Internal("an ensured set vanished".into()))?,
        );
    }
    Ok(rows)
}

pub(super) async fn ensure_sets_of(
    tx: &mut PgConnection,
    key: &ProjectKey,
    sets: &[NewSet],
) -> Result<Vec<SetRow>> {
    let project = projects::require(&mut *tx, key).await?;
    ensure_sets(tx, project, &key.org_id, sets).await
}

pub(super) async fn list_sets(conn: &mut PgConnection, key: &ProjectKey) -> Result<Vec<SetRow>> {
    let project = projects::require(&mut *conn, key).await?;
    let org = key.org_id.clone();
    sets_where(
        conn,
        "s.org_id = $2 AND (s.project = $1 OR s.project IS NULL) ORDER BY s.set_id COLLATE \"C\"",
        |q| q.bind(project).bind(org),
    )
    .await
}

pub(super) async fn sets_of_type(conn: &mut PgConnection, set_type: i64) -> Result<Vec<SetRow>> {
    sets_where(
        conn,
        "s.set_type = $1 ORDER BY s.set_id COLLATE \"C\"",
        |q| q.bind(set_type),
    )
    .await
}

pub(super) async fn configure_set(
    tx: &mut PgConnection,
    set: i64,
    config: &SetConfig,
) -> Result<()> {
    let changed = sqlx::query("UPDATE semantic_sets SET embedder = $2, llm = $3 WHERE id = $1")
        .bind(set)
        .bind(&config.embedder)
        .bind(&config.llm)
        .execute(tx)
        .await
        .map_err(db_error)?
        .rows_affected();
    if changed == 0 {
        return Err(Error::NotFound(format!("feature set {set} does not exist")));
    }
    Ok(())
}

pub(super) async fn project_config(
    conn: &mut PgConnection,
    project: i64,
) -> Result<Option<ProjectConfig>> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT embedder, reranker FROM projects WHERE id = $1")
            .bind(project)
            .fetch_optional(conn)
            .await
            .map_err(db_error)?;
    Ok(row.map(|(embedder, reranker)| ProjectConfig { embedder, reranker }))
}

// Categories and tags.

const CATEGORY_COLUMNS: &str = "id, public_id, set_ref, set_type, name, prompt, description";

fn category_from_row(row: &PgRow) -> sqlx::Result<Category> {
    let set: Option<i64> = row.try_get(2)?;
    let set_type: Option<i64> = row.try_get(3)?;
    let owner = match (set, set_type) {
        (Some(set), _) => CategoryOwner::Set(SetId::from_raw(set)),
        (None, Some(set_type)) => CategoryOwner::SetType(SetTypeId::from_raw(set_type)),
        (None, None) => return Err(bad_column(2, "a category without an owner")),
    };
    Ok(Category {
        internal_id: CategoryId::from_raw(row.try_get(0)?),
        id: row.try_get(1)?,
        owner,
        name: row.try_get(4)?,
        prompt: row.try_get(5)?,
        description: row.try_get(6)?,
        tags: Vec::new(),
    })
}

const TAG_COLUMNS: &str = "id, public_id, category, name, description";

fn tag_from_row(row: &PgRow) -> sqlx::Result<Tag> {
    Ok(Tag {
        internal_id: TagId::from_raw(row.try_get(0)?),
        id: row.try_get(1)?,
        category: CategoryId::from_raw(row.try_get(2)?),
        name: row.try_get(3)?,
        description: row.try_get(4)?,
    })
}

/// Fills in the categories' tags, in the order they were added.
async fn with_tags(
    conn: &mut PgConnection,
    mut categories: Vec<Category>,
) -> Result<Vec<Category>> {
    let ids: Vec<i64> = categories.iter().map(|c| c.internal_id.raw()).collect();
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {TAG_COLUMNS} FROM semantic_tags WHERE category = ANY($1) ORDER BY id"
    )))
    .bind(&ids)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    let mut by_category: BTreeMap<CategoryId, Vec<Tag>> = BTreeMap::new();
    for row in &rows {
        let tag = tag_from_row(row).map_err(db_error)?;
        by_category.entry(tag.category).or_default().push(tag);
    }
    for category in &mut categories {
        category.tags = by_category
            .remove(&category.internal_id)
            .unwrap_or_default();
    }
    Ok(categories)
}

fn owner_columns(owner: CategoryOwner) -> (Option<i64>, Option<i64>) {
    match owner {
        CategoryOwner::Set(set) => (Some(set.raw()), None),
        CategoryOwner::SetType(set_type) => (None, Some(set_type.raw())),
    }
}

pub(super) async fn add_category(
    tx: &mut PgConnection,
    owner: CategoryOwner,
    new: &NewCategory,
) -> Result<Category> {
    let (set, set_type) = owner_columns(owner);
    let org: Option<String> = sqlx::query_scalar(
        "SELECT org_id FROM semantic_sets WHERE id = $1
         UNION ALL SELECT org_id FROM semantic_set_types WHERE id = $2 LIMIT 1",
    )
    .bind(set)
    .bind(set_type)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    let Some(org) = org else {
        return Err(Error::NotFound(
            "the category's owner does not exist".into(),
        ));
    };
    let taken: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM semantic_categories
             WHERE org_id = $4 AND (set_ref = $1 OR set_type = $2)
               AND lower(name COLLATE \"C\") = lower($3 COLLATE \"C\"))",
    )
    .bind(set)
    .bind(set_type)
    .bind(&new.name)
    .bind(&org)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_error)?;
    let name_taken = || {
        Error::AlreadyExists(format!(
            "a category named {:?} already exists there",
            new.name
        ))
    };
    if taken {
        return Err(name_taken());
    }
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO semantic_categories (org_id, public_id, set_ref, set_type, name, prompt,
             description)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {CATEGORY_COLUMNS}"
    )))
    .bind(&org)
    .bind(&new.id)
    .bind(set)
    .bind(set_type)
    .bind(&new.name)
    .bind(&new.prompt)
    .bind(&new.description)
    .fetch_one(&mut *tx)
    .await
    .map_err(|err| {
        if is_unique_violation(&err) {
            Error::AlreadyExists(format!("category {} already exists", new.id))
        } else {
            db_error(err)
        }
    })?;
    category_from_row(&row).map_err(db_error)
}

pub(super) async fn find_category(conn: &mut PgConnection, id: &str) -> Result<Option<Category>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {CATEGORY_COLUMNS} FROM semantic_categories WHERE public_id = $1 ORDER BY id LIMIT 1"
    )))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db_error)?;
    let found = row
        .as_ref()
        .map(category_from_row)
        .transpose()
        .map_err(db_error)?;
    Ok(with_tags(conn, found.into_iter().collect()).await?.pop())
}

pub(super) async fn categories_of(
    conn: &mut PgConnection,
    owners: &[CategoryOwner],
) -> Result<Vec<Category>> {
    let (mut sets, mut set_types) = (Vec::new(), Vec::new());
    for owner in owners {
        match *owner {
            CategoryOwner::Set(set) => sets.push(set.raw()),
            CategoryOwner::SetType(set_type) => set_types.push(set_type.raw()),
        }
    }
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {CATEGORY_COLUMNS} FROM semantic_categories
         WHERE set_ref = ANY($1) OR set_type = ANY($2) ORDER BY id"
    )))
    .bind(&sets)
    .bind(&set_types)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    let categories = rows
        .iter()
        .map(category_from_row)
        .collect::<sqlx::Result<Vec<_>>>()
        .map_err(db_error)?;
    with_tags(conn, categories).await
}

/// Deletes the category (its tags cascade) and the features of `sets` in a category
/// of its name (compared without regard to ASCII case, as the domain compares names).
pub(super) async fn delete_category(
    tx: &mut PgConnection,
    internal_id: i64,
    sets: &[i64],
) -> Result<()> {
    let name: Option<String> =
        sqlx::query_scalar("SELECT name FROM semantic_categories WHERE id = $1")
            .bind(internal_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
    let Some(name) = name else {
        return Ok(());
    };
    sqlx::query(
        "DELETE FROM semantic_features
         WHERE set_ref = ANY($1) AND lower(category COLLATE \"C\") = lower($2 COLLATE \"C\")",
    )
    .bind(sets)
    .bind(&name)
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    sqlx::query("DELETE FROM semantic_categories WHERE id = $1")
        .bind(internal_id)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    bump_sets(tx, sets).await
}

pub(super) async fn disable_category(tx: &mut PgConnection, set: i64, name: &str) -> Result<()> {
    let row = require_set(&mut *tx, set).await?;
    sqlx::query(
        "INSERT INTO semantic_disabled (org_id, set_ref, name) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(&row.org_id)
    .bind(set)
    .bind(name)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

pub(super) async fn disabled_categories(conn: &mut PgConnection, set: i64) -> Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT name FROM semantic_disabled WHERE set_ref = $1
         ORDER BY lower(name COLLATE \"C\"), name COLLATE \"C\"",
    )
    .bind(set)
    .fetch_all(conn)
    .await
    .map_err(db_error)
}

pub(super) async fn add_tag(
    tx: &mut PgConnection,
    category: i64,
    id: &str,
    name: &str,
    description: &str,
) -> Result<Tag> {
    let org: Option<String> =
        sqlx::query_scalar("SELECT org_id FROM semantic_categories WHERE id = $1")
            .bind(category)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
    let Some(org) = org else {
        return Err(Error::NotFound(format!(
            "category {category} does not exist"
        )));
    };
    let taken: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM semantic_tags
             WHERE org_id = $3 AND category = $1
               AND lower(name COLLATE \"C\") = lower($2 COLLATE \"C\"))",
    )
    .bind(category)
    .bind(name)
    .bind(&org)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_error)?;
    if taken {
        return Err(Error::AlreadyExists(format!(
            "the category already has a tag named {name:?}"
        )));
    }
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO semantic_tags (org_id, public_id, category, name, description)
         VALUES ($1, $2, $3, $4, $5) RETURNING {TAG_COLUMNS}"
    )))
    .bind(&org)
    .bind(id)
    .bind(category)
    .bind(name)
    .bind(description)
    .fetch_one(&mut *tx)
    .await
    .map_err(|err| {
        if is_unique_violation(&err) {
            Error::AlreadyExists(format!("tag {id} already exists"))
        } else {
            db_error(err)
        }
    })?;
    tag_from_row(&row).map_err(db_error)
}

pub(super) async fn find_tag(conn: &mut PgConnection, id: &str) -> Result<Option<Tag>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {TAG_COLUMNS} FROM semantic_tags WHERE public_id = $1 ORDER BY id LIMIT 1"
    )))
    .bind(id)
    .fetch_optional(conn)
    .await
    .map_err(db_error)?;
    row.as_ref().map(tag_from_row).transpose().map_err(db_error)
}

pub(super) async fn delete_tag(tx: &mut PgConnection, internal_id: i64) -> Result<()> {
    sqlx::query("DELETE FROM semantic_tags WHERE id = $1")
        .bind(internal_id)
        .execute(tx)
        .await
        .map_err(db_error)?;
    Ok(())
}
