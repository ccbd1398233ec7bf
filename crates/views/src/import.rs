//! The import use case: a raw agent trace becomes a read-only session whose events and views
//! come from the file, kept byte for byte.
use memex_event::{ArtifactPolicy, BatchLimits, EventInput, NamespaceId, PreparedBatch, prepare_batch};
use memex_store::{AppendOutcome, ImportRequest, NewSession, Session};
use memex_vcc::{CompileOptions, Diagnostic, InputFormat, TraceFormat};

use crate::{ViewError, Views};

/// A trace to import.
#[derive(Debug, Clone)]
pub struct ImportTrace {
    /// The session to create; its `source_format` is set from the trace.
    pub session: NewSession,
    pub file_name: String,
    pub format: InputFormat,
    /// Make the first problem in the trace fatal.
    pub strict: bool,
    /// The file, byte for byte.
    pub raw: Vec<u8>,
}

/// What an import stored.
#[derive(Debug, Clone)]
pub struct Imported {
    pub session: Session,
    pub format: TraceFormat,
    /// The media type the raw file is stored under.
    pub media_type: &'static str,
    pub events: u64,
    pub chains: usize,
    /// Problems met in the trace (their records were skipped), in input order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Views {
    /// Compiles the trace (one lexing pass gives its views and its events), stores the raw file,
    /// the session and the events in one transaction, and keeps the compile warm. A malformed
    /// record is a diagnostic, not a failure, unless `strict`.
    pub async fn import(
        &self,
        ns: NamespaceId,
        req: ImportTrace,
        policy: &ArtifactPolicy,
        max_id_bytes: usize,
    ) -> Result<Imported, ViewError> {
        let ImportTrace { session, file_name, format, strict, raw } = req;
        let stem = memex_vcc::stem_of(&file_name);
        let compile = tracing::debug_span!("vcc.compile", memex.bytes = raw.len());
        let (raw, trace, records) = tracing::Instrument::instrument(
            tokio::task::spawn_blocking(move || {
                let (trace, records) = memex_vcc::compile_with_events(&raw, &stem, CompileOptions { format, strict })?;
                Ok::<_, memex_vcc::CompileError>((raw, trace, records))
            }),
            compile,
        )
        .await
        .map_err(|e| ViewError::Task(e.to_string()))?
        .map_err(|e| ViewError::invalid("chunk", e.to_string()))?;
        let inputs = import_inputs(records, &session.agent_id);
        // A trace's ids are the agent's, not a client's: longer ones than an append allows are
        // kept (up to 1 KiB), and a trace is as long as it is.
        let limits = BatchLimits { max_events: usize::MAX, max_id_bytes: max_id_bytes.max(1024) };
        let mut batch = if inputs.is_empty() {
            PreparedBatch { events: vec![], external_tool_calls: vec![] }
        } else {
            prepare_batch(inputs, &limits, policy)?
        };
        batch.external_tool_calls.clear(); // a trace may hold results whose call it never saw
        let trace_format = trace.format();
        let media_type = trace_format.media_type();
        let (session, outcome): (Session, AppendOutcome) = self
            .store
            .import_session(ImportRequest {
                namespace_id: ns.0,
                session: NewSession { source_format: trace_format.name().to_owned(), ..session },
                raw,
                file_name,
                media_type: media_type.to_owned(),
                batch,
            })
            .await?;
        let imported = Imported {
            format: trace_format,
            media_type,
            events: outcome.event_ids.len() as u64,
            chains: trace.chains().len(),
            diagnostics: trace.diagnostics().to_vec(),
            session: session.clone(),
        };
        self.insert(session, trace).await;
        Ok(imported)
    }
}

/// An imported trace's events as append inputs ([`memex_vcc::EventRecord::into_append`]: the
/// mapping `memex watch` appends by too).
fn import_inputs(records: Vec<memex_vcc::EventRecord>, agent_id: &str) -> Vec<EventInput> {
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let r = r.into_append(i as u64, |k| memex_event::EventKind::parse(k).is_ok());
            EventInput {
                kind: r.kind,
                content: r.content,
                agent_id: r.agent_id.unwrap_or_else(|| agent_id.to_owned()),
                task_id: String::new(),
                tool_name: r.tool_name,
                tool_call_id: r.tool_call_id,
                event_time: r.event_time,
                metadata_json: if r.metadata.is_empty() {
                    String::new()
                } else {
                    serde_json::Value::Object(r.metadata).to_string()
                },
                media_type: String::new(),
            }
        })
        .collect()
}
