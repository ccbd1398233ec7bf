//! The tools: each maps its arguments onto one gRPC request, makes the call as the caller, and
//! renders the answer (or the status, as a tool error).
use std::future::Future;

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Extensions, Implementation,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::args::*;
use crate::status::{invalid_argument, tool_error};
use crate::{Caller, Clients, render};

/// The header an HTTP client may send to act in a namespace other than the server's default.
pub const NAMESPACE_HEADER: &str = "x-memex-namespace";

const INSTRUCTIONS: &str = "memex keeps the complete record of agent sessions (every message, tool call and tool output) \
and compiles context from it. Cite and fetch evidence by pointer: \"SESSION_ID:FIRST-LAST\" names lines of a \
session's full view. Typical use: search for what you need, then read_lines on a hit's pointer to see the exact \
lines. build_pack assembles the context for a turn; get_task_state/update_task_state keep a task's goals, \
constraints and open loops; compact evicts old window content behind a manifest that expand_manifest restores. \
Memory, derived from the same events: recall_all gives an overview of every topic covered, expand_topic pages one \
topic in at more depth, query_facts answers what the current status of a test, file or decision is (superseded facts \
left out), find_quote and remember_when find what was said or seen (remember_when within a time range).";

/// The MCP server: the tools, in front of one memex gRPC endpoint.
#[derive(Clone)]
pub struct Memex {
    channel: Channel,
    /// Who calls are made as when the request does not say (stdio: the connection's key and
    /// namespace; HTTP: no key, the configured default namespace).
    default: Caller,
}

impl Memex {
    pub fn new(channel: Channel, default: Caller) -> Memex {
        Memex { channel, default }
    }

    /// The caller of this request: over HTTP, the request's `Authorization` and
    /// `X-Memex-Namespace` headers; over stdio, the connection's.
    fn caller(&self, ext: &Extensions) -> Caller {
        let Some(parts) = ext.get::<http::request::Parts>() else { return self.default.clone() };
        let authorization =
            parts.headers.get(http::header::AUTHORIZATION).and_then(|v| MetadataValue::try_from(v.as_bytes()).ok());
        let namespace = parts
            .headers
            .get(NAMESPACE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map_or_else(|| self.default.namespace.clone(), str::to_owned);
        Caller { authorization, namespace }
    }

    /// The namespace a tool acts in: its own argument, else the caller's.
    fn namespace(&self, ext: &Extensions, given: Option<String>) -> String {
        namespace_or(given, &self.caller(ext))
    }

    /// Runs one call as the caller of `ext`, with `namespace` (else the caller's).
    async fn call<F, Fut, T>(
        &self,
        ext: &Extensions,
        namespace: Option<String>,
        mut f: F,
    ) -> Result<(String, T), CallToolResult>
    where
        F: FnMut(Clients, String) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let caller = self.caller(ext);
        let ns = namespace_or(namespace, &caller);
        // A call the server shed (nothing done) is sent again after its hint, as the CLI does.
        let call = || f(Clients::new(&self.channel, &caller), ns.clone());
        match memex_client::shed_retry(memex_client::SHED_RETRIES, call).await {
            Ok(r) => Ok((ns, r.into_inner())),
            Err(status) => {
                tracing::debug!(code = ?status.code(), message = status.message(), "MCP tool call failed");
                Err(tool_error(&status))
            }
        }
    }
}

fn done(r: Result<CallToolResult, CallToolResult>) -> Result<CallToolResult, ErrorData> {
    Ok(r.unwrap_or_else(|e| e))
}

#[tool_router]
impl Memex {
    #[tool(
        description = "Search the namespace's agent history (messages, tool calls, tool outputs) by words and meaning. \
Returns ranked hits, each with a pointer SESSION_ID:FIRST-LAST (pass it to read_lines for the exact lines), its \
event id (usable as evidence in report/update_task_state), kind and matched text.",
        annotations(read_only_hint = true)
    )]
    async fn search(
        &self,
        Parameters(a): Parameters<SearchArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let query = a.query.clone();
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.search.search(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::search(&query, r)))
    }

    #[tool(
        description = "Dereference a pointer: return the exact lines SESSION_ID:FIRST-LAST of a session's full view \
(the lossless transcript), numbered, optionally with context lines around them. Use it on pointers from search, \
build_pack or compact to see the evidence verbatim.",
        annotations(read_only_hint = true)
    )]
    async fn read_lines(
        &self,
        Parameters(a): Parameters<ReadLinesArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let pointer = a.pointer.clone();
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.views.read_lines(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::read_lines(&pointer, r)))
    }

    #[tool(description = "Build the context pack for one turn of a session: system prompt, task state card, \
retrieved evidence, recent tail and the user message, each within its token budget. Returns the pack text to put \
in the model's context, its id, and every item's pointer (SESSION_ID:FIRST-LAST). The pack is stored.")]
    async fn build_pack(
        &self,
        Parameters(a): Parameters<BuildPackArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.context.build_pack(r).await }
            })
            .await;
        done(r.map(|(_, p)| render::pack(p)))
    }

    #[tool(
        description = "The handoff snapshot of a session, for picking work up after the context was compacted \
or in a new session: overall goal (the user's requests verbatim), active constraints and corrections, key knowledge, \
every file created/modified/deleted with its latest state, unresolved errors verbatim, recent tool actions with \
their outcome, the plan (done, failed attempt, pending, next) and the last events raw. Built from the complete \
record without a model; every line cites its pointer (read it with read_lines). Within budget_tokens: the least \
important entries go first and are listed as omitted.",
        annotations(read_only_hint = true)
    )]
    async fn handoff(
        &self,
        Parameters(a): Parameters<HandoffArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.context.build_snapshot(r).await }
            })
            .await;
        done(r.map(|(_, s)| render::snapshot(s)))
    }

    #[tool(
        description = "Read a task's state card (goals, constraints, open loops, next actions, premises, key \
pointers, phase) and its version; the version is what update_task_state needs as expected_version.",
        annotations(read_only_hint = true)
    )]
    async fn get_task_state(
        &self,
        Parameters(a): Parameters<GetTaskStateArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.tasks.get_task_state(r).await }
            })
            .await;
        done(r.map(|(_, v)| render::task_state(v)))
    }

    #[tool(description = "Write the next version of a task's state card (the whole state: fields left out become \
empty). expected_version is the version read with get_task_state (0 creates the task); if another writer got there \
first the call fails with FAILED_PRECONDITION naming the current version: read it, merge, retry.")]
    async fn update_task_state(
        &self,
        Parameters(a): Parameters<UpdateTaskStateArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = self.namespace(&ext, a.namespace.clone());
        let req = match a.request(ns.clone()) {
            Ok(r) => r,
            Err((field, why)) => return Ok(invalid_argument(&field, why)),
        };
        let r = self
            .call(&ext, Some(ns), |mut c, _| {
                let req = req.clone();
                async move { c.tasks.update_task_state(req).await }
            })
            .await;
        done(r.map(|(_, v)| render::task_state(v)))
    }

    #[tool(description = "Record an executor's compact report on its task (succeeded, failed, partial or \
blocked) with pointers to the evidence; it is appended to the executor's session and reaches the planner. Every \
pointer must resolve.")]
    async fn report(
        &self,
        Parameters(a): Parameters<ReportArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = self.namespace(&ext, a.namespace.clone());
        let req = match a.request(ns.clone()) {
            Ok(r) => r,
            Err((field, why)) => return Ok(invalid_argument(&field, why)),
        };
        let r = self
            .call(&ext, Some(ns), |mut c, _| {
                let req = req.clone();
                async move { c.tasks.report(req).await }
            })
            .await;
        done(r.map(|(_, r)| render::report(r)))
    }

    #[tool(description = "Compact a session's context window to fit window_budget - headroom tokens: evicts the \
oldest tool results, then tool calls, then dialogue (never system events or the last turns) and leaves a pointer \
manifest in their place. Nothing is lost: expand_manifest returns the evicted events, read_lines their lines.")]
    async fn compact(
        &self,
        Parameters(a): Parameters<CompactArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.context.compact(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::compact(r)))
    }

    #[tool(
        description = "Expand a pointer manifest left by compact: the manifest and the original events it evicted, \
byte for byte, in order, with their pointers; paginated (pass next_page_token back as page_token).",
        annotations(read_only_hint = true)
    )]
    async fn expand_manifest(
        &self,
        Parameters(a): Parameters<ExpandManifestArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.context.expand_manifest(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::expand(r)))
    }

    // --- memory ---------------------------------------------------------------------------

    #[tool(
        description = "Find what was said, decided or output about something in past sessions: searches memory's \
segments (runs of turns on one topic) and tool outputs by words and meaning. Each quote has its pointer \
SESSION_ID:FIRST-LAST (read_lines shows the exact lines), its segment's extractive summary (each line with its \
pointer) and the facts read from it; a quote from an older session whose facts were superseded says so. Use it for \
\"what did we decide about X\", \"where did we see this error\". Set reader to your agent id to skip segments \
you were already shown.",
        annotations(read_only_hint = true)
    )]
    async fn find_quote(
        &self,
        Parameters(a): Parameters<FindQuoteArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let query = a.query.clone();
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.memory.find_quote(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::find_quote(&query, r)))
    }

    #[tool(
        description = "Query structured facts read from the sessions: files edited or created, commands and tests \
run and their results, packages installed, errors seen and resolved, decisions, constraints, user preferences and \
corrections. Filter by subject, verb (synonyms match), status, object, fact_type or a time (as_of); superseded facts \
are left out unless include_superseded, so the answer is the current state. Use it for \"what is the current status \
of test X\", \"which files did we change\", \"what did the user forbid\". Each fact cites its pointer \
SESSION_ID:FIRST-LAST; get_fact shows its supersession chain.",
        annotations(read_only_hint = true)
    )]
    async fn query_facts(
        &self,
        Parameters(a): Parameters<QueryFactsArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = self.namespace(&ext, a.namespace.clone());
        let req = match a.request(ns.clone()) {
            Ok(r) => r,
            Err((field, why)) => return Ok(invalid_argument(&field, why)),
        };
        let r = self
            .call(&ext, Some(ns), |mut c, _| {
                let req = req.clone();
                async move { c.memory.query_facts(req).await }
            })
            .await;
        done(r.map(|(_, r)| render::query_facts(r)))
    }

    #[tool(description = "Demand paging of memory: bring one topic (a tag from recall_all or list_topics) into \
context at a depth: summary (default), segments (each segment's summary) or full (the text of its turns), every line \
with its pointer SESSION_ID:FIRST-LAST. With reader set to your agent id, the topic enters your working set and colder \
topics are paged out (collapsed to their summaries, or dropped) to stay within its budget; the answer says which. Use \
it when a topic needs more detail than its summary.")]
    async fn expand_topic(
        &self,
        Parameters(a): Parameters<ExpandTopicArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.memory.expand_topic(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::expand_topic(r)))
    }

    #[tool(
        description = "Time-scoped recall: find_quote within a time range (a preset such as yesterday or \
last_7_days, or from/to in RFC 3339), plus the facts completed in that range, every item with its pointer \
SESSION_ID:FIRST-LAST. Use it for questions about a period: \"what did we do yesterday\", \"what failed last week\", \
\"what changed since Monday\".",
        annotations(read_only_hint = true)
    )]
    async fn remember_when(
        &self,
        Parameters(a): Parameters<RememberWhenArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let query = a.query.clone();
        let ns = self.namespace(&ext, a.namespace.clone());
        let req = match a.request(ns.clone()) {
            Ok(r) => r,
            Err((field, why)) => return Ok(invalid_argument(&field, why)),
        };
        let r = self
            .call(&ext, Some(ns), |mut c, _| {
                let req = req.clone();
                async move { c.memory.remember_when(req).await }
            })
            .await;
        done(r.map(|(_, r)| render::remember_when(&query, r)))
    }

    #[tool(
        description = "A bird's-eye view of everything the namespace's sessions covered: the summary of every topic \
of the topic cover, largest first, within max_tokens, each summary line with its pointer SESSION_ID:FIRST-LAST. Use \
it at the start of work, or to learn what memory holds before searching; then expand_topic on a tag for detail.",
        annotations(read_only_hint = true)
    )]
    async fn recall_all(
        &self,
        Parameters(a): Parameters<RecallAllArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.memory.recall_all(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::recall_all(r)))
    }

    #[tool(
        description = "List the namespace's memory topics: each tag with its aliases, counts of segments, turns, \
sessions and facts, its time span, description and summary lines with their pointers SESSION_ID:FIRST-LAST; \
optionally only tags or aliases containing a string. Paginated (pass next_page_token back as page_token). Use it to find the tag to give \
expand_topic.",
        annotations(read_only_hint = true)
    )]
    async fn list_topics(
        &self,
        Parameters(a): Parameters<ListTopicsArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.memory.list_topics(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::list_topics(r)))
    }

    #[tool(
        description = "Read one fact by id (from query_facts, find_quote or remember_when) with its supersession \
chain, oldest first: how a status changed over time (a test failed, then passed; a decision replaced), each link \
with its pointer SESSION_ID:FIRST-LAST.",
        annotations(read_only_hint = true)
    )]
    async fn get_fact(
        &self,
        Parameters(a): Parameters<GetFactArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.memory.get_fact(r).await }
            })
            .await;
        done(r.map(|(_, r)| render::get_fact(r)))
    }

    #[tool(
        description = "How far memory has got: how many appended events the memory worker has not read yet (lag), \
how many sessions, segments, facts and topics it holds, and whether the topics are current. Check it when the \
memory tools seem to miss recent events.",
        annotations(read_only_hint = true)
    )]
    async fn memory_status(
        &self,
        Parameters(a): Parameters<MemoryStatusArgs>,
        ext: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let ns = a.namespace.clone();
        let r = self
            .call(&ext, ns, |mut c, ns| {
                let r = a.clone().request(ns);
                async move { c.memory.get_memory_status(r).await }
            })
            .await;
        done(r.map(|(_, s)| render::memory_status(s)))
    }
}

#[tool_handler]
impl ServerHandler for Memex {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memex", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    /// As the router's, except that arguments that do not fit a tool's schema read like the
    /// server's own field errors (`INVALID_ARGUMENT: arguments: missing field \`query\``).
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let response = Self::tool_router().call(ToolCallContext::new(self, request, context)).await?;
        Ok(match response {
            CallToolResponse::Complete(r) if r.is_error == Some(true) && r.structured_content.is_none() => {
                let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
                let why = text.strip_prefix("failed to deserialize parameters: ").unwrap_or(&text);
                let mut e =
                    CallToolResult::error(vec![ContentBlock::text(format!("INVALID_ARGUMENT: arguments: {why}"))]);
                e.structured_content =
                    Some(serde_json::json!({ "code": "INVALID_ARGUMENT", "message": format!("arguments: {why}") }));
                CallToolResponse::Complete(e)
            }
            other => other,
        })
    }
}

/// A tool's `namespace` argument, else the caller's.
fn namespace_or(given: Option<String>, caller: &Caller) -> String {
    given.filter(|n| !n.is_empty()).unwrap_or_else(|| caller.namespace.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool has a description and an object schema whose optional arguments are plain
    /// types (no `["integer", "null"]`, which Gemini's function declarations reject).
    #[test]
    fn tool_schemas_are_portable() {
        let tools = Memex::tool_router().list_all();
        assert_eq!(tools.len(), 17);
        for t in tools {
            assert!(t.description.as_deref().is_some_and(|d| d.len() > 80), "{}", t.name);
            let schema = serde_json::to_value(&*t.input_schema).expect("schema");
            assert_eq!(schema["type"], "object", "{}", t.name);
            assert!(!schema.to_string().contains("\"null\""), "{}: {schema}", t.name);
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            assert!(!required.iter().any(|r| r == "namespace"), "{}", t.name);
        }
    }
}
