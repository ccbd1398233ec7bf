use chrono::{DateTime, Utc};
use memex_event::FieldError;
use uuid::Uuid;

use crate::error::is_unique_violation;
use crate::{Result, Session, Store, StoreError};

/// A session to create.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewSession {
    /// Client-chosen id, for idempotent creation; a UUIDv7 is made when absent.
    pub id: Option<Uuid>,
    pub agent_id: String,
    pub parent_session_id: Option<Uuid>,
    pub task_id: Option<String>,
    pub source_format: String,
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    pub agent_id: Option<String>,
    pub task_id: Option<String>,
    pub parent_session_id: Option<Uuid>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SessionPage {
    pub sessions: Vec<Session>,
    pub next_page_token: Option<String>,
}

pub(crate) type SessionRow = (
    Uuid,
    Uuid,
    String,
    Option<Uuid>,
    Option<String>,
    String,
    Option<serde_json::Value>,
    DateTime<Utc>,
    i64,
    Option<Vec<u8>>,
    Option<String>,
    Option<Uuid>,
);

pub(crate) const SESSION_COLUMNS: &str = "id, namespace_id, agent_id, parent_session_id, task_id, source_format, \
     metadata, created_at, next_seq - 1, source_artifact_id, source_file_name, erased_by";

pub(crate) fn session_from_row(r: SessionRow) -> Session {
    let source = match (r.9.as_deref().and_then(memex_event::ArtifactId::from_slice), r.10) {
        (Some(artifact), Some(file_name)) => Some(crate::SessionSource { artifact, file_name }),
        _ => None,
    };
    Session {
        id: r.0,
        namespace_id: r.1,
        agent_id: r.2,
        parent_session_id: r.3,
        task_id: r.4,
        source_format: r.5,
        metadata: r.6,
        created_at: r.7,
        event_count: u64::try_from(r.8).unwrap_or(0),
        source,
        erased_by: r.11,
    }
}

impl Store {
    /// Creates a session in `namespace_id`. With a client-chosen id, a repeat of the same request
    /// returns the existing session, and a different one under that id is `AlreadyExists`.
    #[tracing::instrument(name = "store.create_session", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "create_session"))]
    pub async fn create_session(&self, namespace_id: Uuid, new: NewSession) -> Result<Session> {
        self.check_parent(namespace_id, new.parent_session_id).await?;
        let id = new.id.unwrap_or_else(Uuid::now_v7);
        let sql = format!(
            "INSERT INTO sessions (id, namespace_id, agent_id, parent_session_id, task_id, source_format, metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {SESSION_COLUMNS}"
        );
        let inserted: std::result::Result<SessionRow, sqlx::Error> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(namespace_id)
            .bind(&new.agent_id)
            .bind(new.parent_session_id)
            .bind(&new.task_id)
            .bind(&new.source_format)
            .bind(&new.metadata)
            .fetch_one(&self.pool)
            .await;
        match inserted {
            Ok(row) => Ok(session_from_row(row)),
            Err(e) if is_unique_violation(&e, "sessions_pkey") => {
                let existing = self
                    .session(namespace_id, id)
                    .await
                    .map_err(|_| StoreError::AlreadyExists(format!("session id {id} is taken")))?;
                let same = existing.agent_id == new.agent_id
                    && existing.parent_session_id == new.parent_session_id
                    && existing.task_id == new.task_id
                    && existing.source_format == new.source_format
                    && existing.metadata == new.metadata;
                if same {
                    Ok(existing)
                } else {
                    Err(StoreError::AlreadyExists(format!("session {id} already exists with different attributes")))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A parent session must be in the same namespace (the foreign key holds that too, but its
    /// violation would be an internal error, not one naming the field).
    pub(crate) async fn check_parent(&self, namespace_id: Uuid, parent: Option<Uuid>) -> Result<()> {
        let Some(parent) = parent else { return Ok(()) };
        self.session(namespace_id, parent).await.map(drop).map_err(|e| match e {
            StoreError::SessionNotFound(id) => {
                FieldError::new("parent_session_id", format!("session {id} does not exist in this namespace")).into()
            }
            other => other,
        })
    }

    #[tracing::instrument(name = "store.session", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "session"))]
    pub async fn session(&self, namespace_id: Uuid, id: Uuid) -> Result<Session> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 AND namespace_id = $2");
        let row: Option<SessionRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).bind(namespace_id).fetch_optional(&self.pool).await?;
        row.map(session_from_row).ok_or(StoreError::SessionNotFound(id))
    }

    /// Sessions newest first, filtered, `page_size` at a time.
    #[tracing::instrument(name = "store.list_sessions", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "list_sessions"))]
    pub async fn list_sessions(
        &self,
        namespace_id: Uuid,
        filter: &SessionFilter,
        page_size: u32,
        page_token: Option<&str>,
    ) -> Result<SessionPage> {
        let after = page_token.map(parse_session_token).transpose()?;
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions
             WHERE namespace_id = $1
               AND ($2::text IS NULL OR agent_id = $2)
               AND ($3::text IS NULL OR task_id = $3)
               AND ($4::uuid IS NULL OR parent_session_id = $4)
               AND ($5::timestamptz IS NULL OR (created_at, id) < ($5, $6))
             ORDER BY created_at DESC, id DESC
             LIMIT $7"
        );
        let rows: Vec<SessionRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(namespace_id)
            .bind(&filter.agent_id)
            .bind(&filter.task_id)
            .bind(filter.parent_session_id)
            .bind(after.map(|a| a.0))
            .bind(after.map(|a| a.1))
            .bind(i64::from(page_size) + 1)
            .fetch_all(&self.pool)
            .await?;
        let mut sessions: Vec<Session> = rows.into_iter().map(session_from_row).collect();
        let next_page_token = if sessions.len() > page_size as usize {
            sessions.truncate(page_size as usize);
            sessions.last().map(|s| format!("{}.{}", s.created_at.timestamp_micros(), s.id.simple()))
        } else {
            None
        };
        Ok(SessionPage { sessions, next_page_token })
    }
}

fn parse_session_token(token: &str) -> Result<(DateTime<Utc>, Uuid)> {
    let bad = || FieldError::new("page_token", "is not a token this server issued");
    let (micros, id) = token.split_once('.').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let at = DateTime::from_timestamp_micros(micros).ok_or_else(bad)?;
    let id = Uuid::try_parse(id).map_err(|_| bad())?;
    Ok((at, id))
}
