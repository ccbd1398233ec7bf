//! Memory's async shell (VC §3): the **worker** (`worker.rs`) that reads new events into turns,
//! segments, facts and topics with the pure core (`memex-memory`) and keeps them in Postgres
//! (`tables.rs`, `topics.rs`); the **reader tools** (`reader/`) over them; and the interpreter
//! that asks an OpenAI-compatible chat model (`openai.rs`).
//!
//! **Architecture invariant:** derived: every row here is rebuilt from `events` (the worker's
//! progress reset), and the heuristic interpreter rebuilds it byte for byte.
//! **Architecture invariant:** nothing here runs on the append path; the worker leases sessions
//! and steps aside while requests wait.
//! **Architecture invariant:** every answer cites pointers into the full view (the `FullView` seam).

pub mod config;
mod error;
pub mod handoff;
pub mod openai;
mod pointers;
pub mod reader;
mod supersession;
pub mod tables;
pub mod topics;
pub mod vectors;
pub mod worker;

pub use config::{InterpreterKind, MemoryConfig, OpenAiConfig};
pub use error::RecallError;
pub use reader::{EventSearch, FactQuery, Memory, QuoteRequest, SearchHit, SearchHits, SearchQuery};
pub use vectors::{SharedVectors, TextVectors};
pub use worker::{Foreground, MemoryProbe, MemoryProgress, MemoryWorker, WorkerParts};

use std::sync::Arc;

use memex_memory::{Heuristic, Interpreter};
use memex_tokens::TokenCounter;

/// The interpreter `[memory]` asks for.
pub fn interpreter(config: &MemoryConfig, counter: Arc<dyn TokenCounter>) -> Result<Arc<dyn Interpreter>, RecallError> {
    Ok(match config.interpreter {
        InterpreterKind::Heuristic => {
            Arc::new(Heuristic { summary: config.summary.clone(), counter: Box::new(SharedCounter(counter)) })
        }
        InterpreterKind::Openai => {
            Arc::new(openai::OpenAiInterpreter::new(config.openai.clone(), config.summary.clone(), counter)?)
        }
    })
}

/// A shared token counter as a boxed one.
struct SharedCounter(Arc<dyn TokenCounter>);

impl TokenCounter for SharedCounter {
    fn count(&self, text: &str) -> usize {
        self.0.count(text)
    }

    fn count_up_to(&self, text: &str, limit: usize) -> usize {
        self.0.count_up_to(text, limit)
    }
}

/// Forgets a namespace's derived memory so that the worker reads every session again from its
/// first event (`memex memory rebuild`): progress, turns, segments, facts, topics. Readers'
/// working sets and what they were shown stay.
pub async fn reset_namespace(pool: &sqlx::PgPool, ns: uuid::Uuid) -> Result<(), RecallError> {
    let mut tx = pool.begin().await?;
    for table in
        ["memory_progress", "memory_turns", "memory_segments", "memory_facts", "memory_topics", "memory_namespaces"]
    {
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE namespace_id = $1")))
            .bind(ns)
            .execute(&mut *tx)
            .await?;
    }
    // The workers are told as after an append: the sessions are registered and read again now.
    sqlx::query("SELECT pg_notify($1, '')").bind(memex_store::APPENDED_CHANNEL).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(())
}
