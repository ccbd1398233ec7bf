//! Reading events back: by id, or by a session's seq range, paginated.
use chrono::{DateTime, Utc};
use memex_event::{ArtifactId, FieldError};
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::{expected_rows, settled_if};
use crate::{ArtifactRef, Event, Result, Store, StoreError};

/// An inclusive seq range; `to = None` reads to the end of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRange {
    pub from: u64,
    pub to: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next_page_token: Option<String>,
}

pub(crate) type EventRow = (
    Uuid,
    Uuid,
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    DateTime<Utc>,
    DateTime<Utc>,
    Option<serde_json::Value>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

/// The event select with `$content` as its content column: one text for both selects below, so
/// that neither can drift from the other's columns (or from [`EventRow`]).
macro_rules! event_select {
    ($content:literal) => {
        concat!(
            "SELECT e.id, e.session_id, e.seq, e.kind, ",
            $content,
            ", e.agent_id, e.task_id, e.tool_name,
        e.tool_call_id, e.event_time, e.ingest_time, e.metadata, e.artifact_id, a.size, a.media_type,
        e.task_state_version
 FROM events e
 LEFT JOIN LATERAL (SELECT a.size, a.media_type FROM artifacts a
                    WHERE a.namespace_id = e.namespace_id AND a.id = e.artifact_id LIMIT 1) a ON true"
        )
    };
}

/// Events with their artifact's size and media type. The artifact is looked up per event (LATERAL
/// … LIMIT 1 keeps the planner from flattening it): as a plain join, a namespace with few artifacts
/// got a hash join that scanned the whole artifacts table on every read of a few events.
pub(crate) const EVENT_SELECT: &str = event_select!("e.content");

/// [`EVENT_SELECT`] reading the content of the events in `$3` alone (the others' is `''`): only
/// the branch taken reads the column, so the others' values are never detoasted.
const EVENT_SELECT_CONTENT_OF: &str = event_select!("CASE WHEN e.id = ANY($3) THEN e.content ELSE '' END");

pub(crate) fn event_from_row(r: EventRow) -> Event {
    let artifact = match (r.12.as_deref().and_then(ArtifactId::from_slice), r.13, r.14) {
        (Some(id), Some(size), Some(media_type)) => Some(ArtifactRef { id, size: size as u64, media_type }),
        _ => None,
    };
    Event {
        id: r.0,
        session_id: r.1,
        seq: r.2 as u64,
        kind: r.3,
        content: r.4,
        agent_id: r.5,
        task_id: r.6,
        tool_name: r.7,
        tool_call_id: r.8,
        event_time: r.9,
        ingest_time: r.10,
        metadata: r.11,
        artifact,
        task_state_version: r.15.map(|v| v as u64),
    }
}

impl Store {
    /// The events with these ids, in the order asked. An id that is not an event of this
    /// namespace is `EventNotFound`, naming its position (`event_ids[2]`). Events never change,
    /// so the standby answers when it has them all.
    #[tracing::instrument(name = "store.events_by_ids", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "events_by_ids"))]
    pub async fn events_by_ids(&self, namespace_id: Uuid, ids: &[Uuid]) -> Result<Vec<Event>> {
        self.read_by_ids(namespace_id, ids, None).await
    }

    /// [`Store::events_by_ids`], with the content of the events in `with_content` alone: the
    /// others come with an empty `content`. For a search that shows its hits' stored chunks: a
    /// hit's whole tool output (often tens of kilobytes, compressed out of line) is then neither
    /// decompressed nor sent.
    #[tracing::instrument(name = "store.events_by_ids", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "events_by_ids"))]
    pub async fn events_by_ids_content_of(
        &self,
        namespace_id: Uuid,
        ids: &[Uuid],
        with_content: &[Uuid],
    ) -> Result<Vec<Event>> {
        self.read_by_ids(namespace_id, ids, Some(with_content)).await
    }

    async fn read_by_ids(&self, namespace_id: Uuid, ids: &[Uuid], with_content: Option<&[Uuid]>) -> Result<Vec<Event>> {
        let select = if with_content.is_some() { EVENT_SELECT_CONTENT_OF } else { EVENT_SELECT };
        let sql = format!("{select} WHERE e.id = ANY($1) AND e.namespace_id = $2");
        let sql = &sql;
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, EventRow>(sqlx::AssertSqlSafe(sql.clone())).bind(ids).bind(namespace_id);
            let q = match with_content {
                Some(c) => q.bind(c),
                None => q,
            };
            Ok::<_, StoreError>(q.fetch_all(&pool).await?)
        };
        let rows = self.settled(read, |rows| settled_if(rows.len() >= ids.len(), rows)).await?;
        let by_id: std::collections::HashMap<Uuid, Event> =
            rows.into_iter().map(event_from_row).map(|e| (e.id, e)).collect();
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                by_id
                    .get(id)
                    .cloned()
                    .ok_or_else(|| StoreError::EventNotFound { field: format!("event_ids[{i}]"), id: *id })
            })
            .collect()
    }

    /// A page of a session's events in seq order.
    #[tracing::instrument(name = "store.events_in_range", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "events_in_range"))]
    pub async fn events_in_range(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        range: SeqRange,
        page_size: u32,
        page_token: Option<&str>,
    ) -> Result<EventPage> {
        let from = match page_token {
            Some(t) => parse_seq_token(t)?.max(range.from),
            None => range.from,
        };
        let to = range.to.map(|t| t as i64).unwrap_or(i64::MAX);
        let sql = format!(
            "{EVENT_SELECT} WHERE e.session_id = $1 AND e.namespace_id = $2 AND e.seq >= $3 AND e.seq <= $4
             ORDER BY e.seq LIMIT $5"
        );
        let sql = &sql;
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, EventRow>(sqlx::AssertSqlSafe(sql.clone()))
                .bind(session_id)
                .bind(namespace_id)
                .bind(from as i64)
                .bind(to)
                .bind(i64::from(page_size) + 1);
            Ok::<_, StoreError>(q.fetch_all(&pool).await?)
        };
        // Settled only below a head the caller knows (`to`): a complete log has every seq there.
        let rows = match range.to {
            Some(to) => {
                let want = expected_rows(from, to, u64::from(page_size) + 1);
                self.settled(read, |rows| settled_if(rows.len() as u64 == want, rows)).await?
            }
            None => read(self.pool.clone()).await?,
        };
        if rows.is_empty() {
            // Tell an empty range apart from a session that is not there.
            self.session(namespace_id, session_id).await?;
        }
        let mut events: Vec<Event> = rows.into_iter().map(event_from_row).collect();
        let next_page_token = if events.len() > page_size as usize {
            events.truncate(page_size as usize);
            events.last().map(|e| seq_page_token(e.seq + 1))
        } else {
            None
        };
        Ok(EventPage { events, next_page_token })
    }
}

/// The page token that resumes a range read at `seq`.
pub fn seq_page_token(seq: u64) -> String {
    format!("seq:{seq}")
}

fn parse_seq_token(token: &str) -> Result<u64> {
    token
        .strip_prefix("seq:")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| FieldError::new("page_token", "is not a token this server issued").into())
}

impl Store {
    /// For an imported session: the input line of the trace record each event came from
    /// (`metadata.source_line`, set at import), for the given seqs.
    #[tracing::instrument(name = "store.event_source_lines", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "event_source_lines"))]
    pub async fn event_source_lines(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        seqs: &[i64],
    ) -> Result<Vec<(u64, u32)>> {
        let rows: Vec<(i64, Option<i32>)> = sqlx::query_as(
            "SELECT seq, (metadata->>'source_line')::int4 FROM events
             WHERE session_id = $1 AND namespace_id = $2 AND seq = ANY($3)",
        )
        .bind(session_id)
        .bind(namespace_id)
        .bind(seqs)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().filter_map(|(seq, line)| Some((seq as u64, u32::try_from(line?).ok()?))).collect())
    }
}
