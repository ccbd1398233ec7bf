//! The tools' arguments: each struct's JSON schema (doc comments become the descriptions an LLM
//! reads) and its mapping onto the proto request. Every tool takes an optional `namespace`; when
//! absent, the connection's namespace is used. Unknown fields are refused (a typo such as `limt`
//! is an error naming it, not a silently ignored argument). An optional argument's schema is its
//! type alone (absent means "the default"), not `[type, null]`, which some clients (Gemini's
//! function declarations) cannot read.
use memex_proto::v1 as pb;
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `search`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words to look for in the namespace's events and tool outputs (plain words; no query syntax).
    pub query: String,
    /// Hits to return, 1..1000 (default 10).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub limit: Option<u32>,
    /// Only events of these sessions (session UUIDs).
    #[serde(default)]
    pub session_ids: Vec<String>,
    /// Only events of these tasks.
    #[serde(default)]
    pub task_ids: Vec<String>,
    /// Only events of these agents.
    #[serde(default)]
    pub agent_ids: Vec<String>,
    /// Only these event kinds, e.g. "tool_result", "user_message", "decision".
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Only these roles: user, assistant, tool, system, other.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Return the matched text with each hit (default true).
    #[serde(default)]
    #[schemars(with = "bool")]
    pub with_text: Option<bool>,
    /// Diversify the hits (maximal marginal relevance) instead of pure relevance order.
    #[serde(default)]
    #[schemars(with = "bool")]
    pub mmr: Option<bool>,
    /// Namespace to search (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl SearchArgs {
    pub fn request(self, namespace: String) -> pb::SearchRequest {
        pb::SearchRequest {
            namespace,
            query: self.query,
            filter: Some(pb::SearchFilter {
                session_ids: self.session_ids,
                task_ids: self.task_ids,
                agent_ids: self.agent_ids,
                kinds: self.kinds,
                roles: self.roles,
                time_from: None,
                time_to: None,
            }),
            limit: self.limit.unwrap_or(0),
            mmr: self.mmr.unwrap_or(false),
            with_text: self.with_text.unwrap_or(true),
            ..Default::default()
        }
    }
}

/// Arguments of `read_lines`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadLinesArgs {
    /// A pointer as memex prints it: "SESSION_ID:FIRST-LAST" (full-view lines, 1-based,
    /// inclusive), or "SESSION_ID#CHAIN:FIRST-LAST" for a later chain of a compacted trace.
    pub pointer: String,
    /// Extra lines to show before and after the range (default 0).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub context: Option<u32>,
    /// Namespace of the session (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl ReadLinesArgs {
    pub fn request(self, namespace: String) -> pb::ReadLinesRequest {
        pb::ReadLinesRequest {
            namespace,
            pointer: self.pointer,
            context: self.context.unwrap_or(0),
            ..Default::default()
        }
    }
}

/// Who the pack is for.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PackRole {
    Solo,
    Planner,
    Executor,
}

/// Arguments of `build_pack`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildPackArgs {
    /// The session (UUID) the pack is for: its recent tail and task are used.
    pub session_id: String,
    /// The user's message for this turn; also the retrieval query.
    #[serde(default)]
    #[schemars(with = "String")]
    pub user_message: Option<String>,
    /// The task whose state card goes into the pack (default: the session's task).
    #[serde(default)]
    #[schemars(with = "String")]
    pub task_id: Option<String>,
    /// A system/policy prefix that lives outside memex.
    #[serde(default)]
    #[schemars(with = "String")]
    pub system_prompt: Option<String>,
    /// Total token budget of the pack (default: the server's context budget).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub context_budget: Option<u32>,
    /// Token budget of the retrieval block (default: the server's).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub retrieval_budget: Option<u32>,
    /// Tokens of memory in the pack (default 0: none): the list of topics with their depths and
    /// costs, then the topics this reader paged in with expand_topic.
    #[serde(default)]
    #[schemars(with = "u32")]
    pub memory_budget: Option<u32>,
    /// Whose working set fills the memory block: the `reader` given to expand_topic (default:
    /// the session).
    #[serde(default)]
    #[schemars(with = "String")]
    pub memory_reader: Option<String>,
    /// "o200k_base" (default) or "cl100k_base".
    #[serde(default)]
    #[schemars(with = "String")]
    pub tokenizer: Option<String>,
    /// Blocks that must be in the pack whole ("system", "task_state", "memory"): the pack is
    /// refused, naming the block and its budget, rather than built with one cut or left out.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub required_blocks: Option<Vec<String>>,
    /// solo, planner or executor (default: derived from the task's delegations).
    #[serde(default)]
    #[schemars(with = "PackRole")]
    pub role: Option<PackRole>,
    /// Keep superseded items at full weight (for questions about the past).
    #[serde(default)]
    #[schemars(with = "bool")]
    pub historical: Option<bool>,
    /// Namespace of the session (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl BuildPackArgs {
    pub fn request(self, namespace: String) -> pb::BuildPackRequest {
        let role = match self.role {
            None => pb::Role::Unspecified,
            Some(PackRole::Solo) => pb::Role::Solo,
            Some(PackRole::Planner) => pb::Role::Planner,
            Some(PackRole::Executor) => pb::Role::Executor,
        };
        let budgets = (self.context_budget.is_some()
            || self.retrieval_budget.is_some()
            || self.memory_budget.is_some())
        .then(|| pb::Budgets {
            context: self.context_budget,
            retrieval: self.retrieval_budget,
            memory: self.memory_budget,
            ..Default::default()
        });
        pb::BuildPackRequest {
            namespace,
            session_id: self.session_id,
            task_id: self.task_id.unwrap_or_default(),
            user_message: self.user_message.unwrap_or_default(),
            system_prompt: self.system_prompt.unwrap_or_default(),
            budgets,
            tokenizer: self.tokenizer.unwrap_or_default(),
            role: role as i32,
            historical: self.historical.unwrap_or(false),
            view: pb::PackView::Basic as i32,
            memory_reader: self.memory_reader.unwrap_or_default(),
            required_blocks: self.required_blocks.unwrap_or_default(),
        }
    }
}

/// The layout of a handoff snapshot.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotLayout {
    Xml,
    Markdown,
}

/// Arguments of `handoff`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffArgs {
    /// The session (UUID) whose state is wanted (default: the latest session of agent_id, else
    /// of task_id).
    #[serde(default)]
    #[schemars(with = "String")]
    pub session_id: Option<String>,
    /// The task whose state card leads (default: the session's task).
    #[serde(default)]
    #[schemars(with = "String")]
    pub task_id: Option<String>,
    /// Without session_id: the agent whose latest session is meant.
    #[serde(default)]
    #[schemars(with = "String")]
    pub agent_id: Option<String>,
    /// Token budget of the snapshot (default 4000; 128 to 100000).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub budget_tokens: Option<u32>,
    /// xml (`<state_snapshot>`, default) or markdown.
    #[serde(default)]
    #[schemars(with = "SnapshotLayout")]
    pub layout: Option<SnapshotLayout>,
    /// "o200k_base" (default) or "cl100k_base".
    #[serde(default)]
    #[schemars(with = "String")]
    pub tokenizer: Option<String>,
    /// Namespace of the session (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl HandoffArgs {
    pub fn request(self, namespace: String) -> pb::BuildSnapshotRequest {
        let format = match self.layout {
            Some(SnapshotLayout::Markdown) => pb::SnapshotFormat::Markdown,
            _ => pb::SnapshotFormat::Xml,
        };
        pb::BuildSnapshotRequest {
            namespace,
            session_id: self.session_id.unwrap_or_default(),
            task_id: self.task_id.unwrap_or_default(),
            agent_id: self.agent_id.unwrap_or_default(),
            budget_tokens: self.budget_tokens.unwrap_or(0),
            tokenizer: self.tokenizer.unwrap_or_default(),
            format: format as i32,
            recent_actions: None,
            tail_events: None,
        }
    }
}

/// Arguments of `get_task_state`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetTaskStateArgs {
    /// The task's id.
    pub task_id: String,
    /// A version to read (default: the current one).
    #[serde(default)]
    #[schemars(with = "u64")]
    pub version: Option<u64>,
    /// Namespace of the task (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl GetTaskStateArgs {
    pub fn request(self, namespace: String) -> pb::GetTaskStateRequest {
        pb::GetTaskStateRequest { namespace, task_id: self.task_id, version: self.version.unwrap_or(0) }
    }
}

/// The phase a task is in.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Planning,
    Execution,
    Evaluation,
}

/// Arguments of `update_task_state`: the whole next state (fields left out are empty).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTaskStateArgs {
    /// The task's id.
    pub task_id: String,
    /// The version this update is based on (from get_task_state); 0 creates the task. A stale
    /// version is refused with FAILED_PRECONDITION naming the current one: read it and retry.
    pub expected_version: u64,
    #[serde(default)]
    pub goals: Vec<String>,
    #[serde(default)]
    pub constraints: Vec<String>,
    /// Questions and threads not yet closed.
    #[serde(default)]
    pub open_loops: Vec<String>,
    #[serde(default)]
    pub next_actions: Vec<String>,
    /// Assumptions the plan rests on.
    #[serde(default)]
    pub premises: Vec<String>,
    /// Evidence to keep at hand. Each is a store pointer: "event:ID" (search gives each hit's),
    /// "blake3:HEX" (an artifact) or "span:SESSION_ID:FIRST_SEQ-LAST_SEQ" (a run of events).
    #[serde(default)]
    pub key_pointers: Vec<String>,
    /// planning (default), execution or evaluation.
    #[serde(default)]
    #[schemars(with = "Phase")]
    pub phase: Option<Phase>,
    /// The task ends with a self-assessment (mistakes and successes stay salient).
    #[serde(default)]
    #[schemars(with = "bool")]
    pub self_assessment: Option<bool>,
    /// Who writes this version.
    #[serde(default)]
    #[schemars(with = "String")]
    pub author: Option<String>,
    /// "o200k_base" (default) or "cl100k_base": counts the card against its cap.
    #[serde(default)]
    #[schemars(with = "String")]
    pub tokenizer: Option<String>,
    /// Namespace of the task (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl UpdateTaskStateArgs {
    /// The request, or the field at fault (`key_pointers[i]`) and why.
    pub fn request(self, namespace: String) -> Result<pb::UpdateTaskStateRequest, (String, String)> {
        let phase = match self.phase {
            None | Some(Phase::Planning) => pb::Phase::Planning,
            Some(Phase::Execution) => pb::Phase::Execution,
            Some(Phase::Evaluation) => pb::Phase::Evaluation,
        };
        let key_pointers = pointers("key_pointers", self.key_pointers)?;
        Ok(pb::UpdateTaskStateRequest {
            namespace,
            task_id: self.task_id,
            expected_version: self.expected_version,
            state: Some(pb::TaskState {
                goals: self.goals,
                constraints: self.constraints,
                open_loops: self.open_loops,
                next_actions: self.next_actions,
                key_pointers,
                phase: phase as i32,
                self_assessment: self.self_assessment.unwrap_or(false),
                premises: self.premises,
            }),
            author: self.author.unwrap_or_default(),
            tokenizer: self.tokenizer.unwrap_or_default(),
        })
    }
}

/// Arguments of `report`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportArgs {
    /// The executor's task.
    pub task_id: String,
    /// The executor's session (UUID): the report is appended there as a `report` event.
    pub session_id: String,
    /// succeeded, failed, partial or blocked.
    pub status: String,
    /// What was done and found, compactly (at most 8 KiB); the evidence goes in pointers.
    pub summary: String,
    /// At least one; each must resolve. A store pointer: "event:ID" (search gives each hit's),
    /// "blake3:HEX" (an artifact) or "span:SESSION_ID:FIRST_SEQ-LAST_SEQ" (a run of events).
    pub pointers: Vec<String>,
    /// Optional UUID chosen by the caller: a retried report is recorded once.
    #[serde(default)]
    #[schemars(with = "String")]
    pub report_id: Option<String>,
    /// Namespace of the task (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl ReportArgs {
    pub fn request(self, namespace: String) -> Result<pb::ReportRequest, (String, String)> {
        Ok(pb::ReportRequest {
            namespace,
            task_id: self.task_id,
            session_id: self.session_id,
            status: self.status,
            summary: self.summary,
            pointers: pointers("pointers", self.pointers)?,
            report_id: self.report_id.unwrap_or_default(),
        })
    }
}

/// Arguments of `compact`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactArgs {
    /// The session (UUID) whose context window to compact.
    pub session_id: String,
    /// The agent's context window, in tokens.
    pub window_budget: u32,
    /// Tokens to keep free: the window is brought within window_budget - headroom (default 0).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub headroom: Option<u32>,
    /// The last this many turns are never evicted (default 2).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub protected_turns: Option<u32>,
    /// Tokens of a system prompt that lives outside memex (counted, never evicted).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub system_tokens: Option<u32>,
    /// "o200k_base" (default) or "cl100k_base".
    #[serde(default)]
    #[schemars(with = "String")]
    pub tokenizer: Option<String>,
    /// Namespace of the session (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl CompactArgs {
    pub fn request(self, namespace: String) -> pb::CompactRequest {
        pb::CompactRequest {
            namespace,
            session_id: self.session_id,
            window_budget: self.window_budget,
            headroom: self.headroom.unwrap_or(0),
            protected_turns: self.protected_turns,
            system_tokens: self.system_tokens.unwrap_or(0),
            tokenizer: self.tokenizer.unwrap_or_default(),
        }
    }
}

/// Arguments of `expand_manifest`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpandManifestArgs {
    /// The manifest's id (as compact returns, or as it appears in a window).
    pub manifest_id: String,
    /// Events per page (default 500, at most 5000).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub page_size: Option<u32>,
    /// The next_page_token of the previous page.
    #[serde(default)]
    #[schemars(with = "String")]
    pub page_token: Option<String>,
    /// Namespace of the manifest (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl ExpandManifestArgs {
    pub fn request(self, namespace: String) -> pb::ExpandManifestRequest {
        pb::ExpandManifestRequest {
            namespace,
            manifest_id: self.manifest_id,
            page_size: self.page_size.unwrap_or(0),
            page_token: self.page_token.unwrap_or_default(),
        }
    }
}

/// How deep `expand_topic` goes: the topic's own summary, the summary of each of its segments,
/// or the full text of its turns. (No doc comment per variant: schemars would make the schema a
/// `oneOf` instead of a plain `enum`.)
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Depth {
    Summary,
    Segments,
    Full,
}

impl Depth {
    fn name(self) -> &'static str {
        match self {
            Depth::Summary => "summary",
            Depth::Segments => "segments",
            Depth::Full => "full",
        }
    }
}

/// A time range `remember_when` searches, ending now (today and yesterday: calendar days, UTC).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub enum TimePreset {
    #[serde(rename = "today")]
    Today,
    #[serde(rename = "yesterday")]
    Yesterday,
    #[serde(rename = "last_7_days")]
    Last7Days,
    #[serde(rename = "last_30_days")]
    Last30Days,
    #[serde(rename = "last_90_days")]
    Last90Days,
    #[serde(rename = "last_365_days")]
    Last365Days,
}

impl TimePreset {
    fn name(self) -> &'static str {
        match self {
            TimePreset::Today => "today",
            TimePreset::Yesterday => "yesterday",
            TimePreset::Last7Days => "last_7_days",
            TimePreset::Last30Days => "last_30_days",
            TimePreset::Last90Days => "last_90_days",
            TimePreset::Last365Days => "last_365_days",
        }
    }
}

/// An RFC 3339 time argument as a proto timestamp, or the field at fault and why.
fn time(field: &str, text: Option<String>) -> Result<Option<prost_types::Timestamp>, (String, String)> {
    text.filter(|t| !t.trim().is_empty())
        .map(|t| {
            t.trim()
                .parse::<prost_types::Timestamp>()
                .map_err(|_| (field.to_owned(), format!("{t:?} is not an RFC 3339 time such as 2025-06-01T09:00:00Z")))
        })
        .transpose()
}

/// Arguments of `find_quote`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindQuoteArgs {
    /// What to look for, in plain words: an error message, a decision, a file or a subject.
    pub query: String,
    /// Quotes to return, 1..100 (default 10).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub limit: Option<u32>,
    /// Only these sessions (session UUIDs).
    #[serde(default)]
    pub session_ids: Vec<String>,
    /// Your agent id: segments already shown to this reader are left out and those returned are
    /// remembered as shown (needs a write key). Omit to search with no such memory.
    #[serde(default)]
    #[schemars(with = "String")]
    pub reader: Option<String>,
    /// Forget what `reader` was shown before this search.
    #[serde(default)]
    #[schemars(with = "bool")]
    pub reset_presented: Option<bool>,
    /// Namespace to search (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl FindQuoteArgs {
    pub fn request(self, namespace: String) -> pb::FindQuoteRequest {
        pb::FindQuoteRequest {
            namespace,
            query: self.query,
            limit: self.limit.unwrap_or(0),
            session_ids: self.session_ids,
            reader: self.reader.unwrap_or_default(),
            reset_presented: self.reset_presented.unwrap_or(false),
        }
    }
}

/// Arguments of `query_facts`: every filter is optional; those given must all match.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryFactsArgs {
    /// The subject contains this (case-insensitive): a file path, a test or command
    /// (`cargo test parser`), a package, an error.
    #[serde(default)]
    #[schemars(with = "String")]
    pub subject: Option<String>,
    /// A verb such as edited, created, ran, passed, failed, installed, seen, resolved, decided;
    /// its synonyms match too (the answer lists them as expanded_verbs).
    #[serde(default)]
    #[schemars(with = "String")]
    pub verb: Option<String>,
    /// active, completed, planned, abandoned or recurring.
    #[serde(default)]
    #[schemars(with = "String")]
    pub status: Option<String>,
    /// The object (e.g. a test's result line, an error's text) contains this (case-insensitive).
    #[serde(default)]
    #[schemars(with = "String")]
    pub object_contains: Option<String>,
    /// file, command, test, package, error, decision, constraint, preference, correction,
    /// personal, experience or world.
    #[serde(default)]
    #[schemars(with = "String")]
    pub fact_type: Option<String>,
    /// What held at this time (RFC 3339, e.g. 2025-06-01T09:00:00Z): facts from before it, less
    /// those superseded by then. Default: now.
    #[serde(default)]
    #[schemars(with = "String")]
    pub as_of: Option<String>,
    /// Also return superseded facts (the history, not only the current state); each names the
    /// fact that replaced it.
    #[serde(default)]
    #[schemars(with = "bool")]
    pub include_superseded: Option<bool>,
    /// Rank by similarity to this question (default: newest first).
    #[serde(default)]
    #[schemars(with = "String")]
    pub question: Option<String>,
    /// Facts to return, 1..500 (default 50).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub limit: Option<u32>,
    /// Only facts of these sessions (session UUIDs).
    #[serde(default)]
    pub session_ids: Vec<String>,
    /// Namespace to query (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl QueryFactsArgs {
    /// The request, or `as_of` and why it is not a time.
    pub fn request(self, namespace: String) -> Result<pb::QueryFactsRequest, (String, String)> {
        Ok(pb::QueryFactsRequest {
            namespace,
            subject: self.subject.unwrap_or_default(),
            verb: self.verb.unwrap_or_default(),
            status: self.status.unwrap_or_default(),
            object_contains: self.object_contains.unwrap_or_default(),
            fact_type: self.fact_type.unwrap_or_default(),
            as_of: time("as_of", self.as_of)?,
            include_superseded: self.include_superseded.unwrap_or(false),
            question: self.question.unwrap_or_default(),
            limit: self.limit.unwrap_or(0),
            session_ids: self.session_ids,
        })
    }
}

/// Arguments of `expand_topic`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpandTopicArgs {
    /// A topic's tag, or one of its aliases (from recall_all or list_topics).
    pub tag: String,
    /// summary (default), segments or full.
    #[serde(default)]
    #[schemars(with = "Depth")]
    pub depth: Option<Depth>,
    /// Your agent id: the topic enters this reader's working set at this depth, paging colder
    /// topics out to stay within its budget (needs a write key). Omit to read without paging.
    #[serde(default)]
    #[schemars(with = "String")]
    pub reader: Option<String>,
    /// Most tokens of text to return (default 2000 at segments, 8000 at full; at most 100000).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub max_tokens: Option<u32>,
    /// Namespace of the topic (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl ExpandTopicArgs {
    pub fn request(self, namespace: String) -> pb::ExpandTopicRequest {
        pb::ExpandTopicRequest {
            namespace,
            tag: self.tag,
            depth: self.depth.map(Depth::name).unwrap_or_default().to_owned(),
            reader: self.reader.unwrap_or_default(),
            max_tokens: self.max_tokens.unwrap_or(0),
        }
    }
}

/// Arguments of `remember_when`: a preset, or from (and optionally to).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberWhenArgs {
    /// What to look for, in plain words.
    pub query: String,
    /// The time range: today, yesterday, last_7_days, last_30_days, last_90_days or
    /// last_365_days. Omit it to give from/to instead.
    #[serde(default)]
    #[schemars(with = "TimePreset")]
    pub preset: Option<TimePreset>,
    /// Start of the range (RFC 3339, e.g. 2025-06-01T00:00:00Z), when no preset is given.
    #[serde(default)]
    #[schemars(with = "String")]
    pub from: Option<String>,
    /// End of the range (RFC 3339; default now).
    #[serde(default)]
    #[schemars(with = "String")]
    pub to: Option<String>,
    /// Quotes to return, 1..100 (default 10).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub limit: Option<u32>,
    /// Your agent id: segments already shown to this reader are left out (needs a write key).
    #[serde(default)]
    #[schemars(with = "String")]
    pub reader: Option<String>,
    /// Only these sessions (session UUIDs).
    #[serde(default)]
    pub session_ids: Vec<String>,
    /// Namespace to search (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl RememberWhenArgs {
    /// The request, or the time field at fault and why.
    pub fn request(self, namespace: String) -> Result<pb::RememberWhenRequest, (String, String)> {
        Ok(pb::RememberWhenRequest {
            namespace,
            query: self.query,
            preset: self.preset.map(TimePreset::name).unwrap_or_default().to_owned(),
            from: time("from", self.from)?,
            to: time("to", self.to)?,
            limit: self.limit.unwrap_or(0),
            reader: self.reader.unwrap_or_default(),
            session_ids: self.session_ids,
        })
    }
}

/// Arguments of `recall_all`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallAllArgs {
    /// Token budget of the answer's text (default 30000, at most 100000).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub max_tokens: Option<u32>,
    /// Namespace to recall (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl RecallAllArgs {
    pub fn request(self, namespace: String) -> pb::RecallAllRequest {
        pb::RecallAllRequest { namespace, max_tokens: self.max_tokens.unwrap_or(0) }
    }
}

/// Arguments of `list_topics`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTopicsArgs {
    /// Only topics whose tag or aliases contain this.
    #[serde(default)]
    #[schemars(with = "String")]
    pub contains: Option<String>,
    /// Topics per page, 1..1000 (default 100).
    #[serde(default)]
    #[schemars(with = "u32")]
    pub limit: Option<u32>,
    /// The next_page_token of the previous page.
    #[serde(default)]
    #[schemars(with = "String")]
    pub page_token: Option<String>,
    /// Namespace to list (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl ListTopicsArgs {
    pub fn request(self, namespace: String) -> pb::ListTopicsRequest {
        pb::ListTopicsRequest {
            namespace,
            limit: self.limit.unwrap_or(0),
            page_token: self.page_token.unwrap_or_default(),
            contains: self.contains.unwrap_or_default(),
        }
    }
}

/// Arguments of `get_fact`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetFactArgs {
    /// The fact's id (as query_facts, find_quote and remember_when return it).
    pub fact_id: String,
    /// Namespace of the fact (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl GetFactArgs {
    pub fn request(self, namespace: String) -> pb::GetFactRequest {
        pb::GetFactRequest { namespace, fact_id: self.fact_id }
    }
}

/// Arguments of `memory_status`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryStatusArgs {
    /// Namespace to report on (default: the connection's namespace).
    #[serde(default)]
    #[schemars(with = "String")]
    pub namespace: Option<String>,
}

impl MemoryStatusArgs {
    pub fn request(self, namespace: String) -> pb::GetMemoryStatusRequest {
        pb::GetMemoryStatusRequest { namespace }
    }
}

/// Store pointers in the CLI's text forms (`event:ID`, `blake3:HEX`, `span:SESSION:FIRST-LAST`,
/// see `memex_client::parse_pointer`), so what `memex` prints can be given here and back; a bare
/// event id (as `search` shows it) is taken as `event:ID`. The server checks that each resolves.
fn pointers(field: &str, texts: Vec<String>) -> Result<Vec<pb::Pointer>, (String, String)> {
    texts.into_iter().enumerate().map(|(i, t)| pointer(&t).map_err(|why| (format!("{field}[{i}]"), why))).collect()
}

fn pointer(text: &str) -> Result<pb::Pointer, String> {
    let text = text.trim();
    let known = ["event:", "blake3:", "artifact:", "span:"].iter().any(|p| text.starts_with(p));
    if !known && !text.contains(':') && !text.is_empty() {
        return memex_client::parse_pointer(&format!("event:{text}")).map_err(|e| e.to_string());
    }
    if !known && text.contains(':') {
        return Err(format!(
            "{text:?} is a line pointer; evidence is a store pointer: event:ID (as search returns), blake3:HEX or span:SESSION_ID:FIRST_SEQ-LAST_SEQ"
        ));
    }
    memex_client::parse_pointer(text).map_err(|e| e.to_string())
}

/// A store pointer as the text `pointers` reads back.
pub fn pointer_text(p: &pb::Pointer) -> String {
    memex_client::format_pointer(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_texts_round_trip() {
        for t in ["event:0193a2b4-0000-7000-8000-000000000001", "blake3:ab12", "span:s-1:3-9"] {
            assert_eq!(pointer_text(&pointer(t).expect(t)), t);
        }
        assert_eq!(pointer_text(&pointer("e1").expect("a bare event id")), "event:e1");
        let err = pointers("pointers", vec!["e1".into(), "span:s:x-2".into()]).expect_err("bad seq");
        assert_eq!(err.0, "pointers[1]");
        let err = pointer("0193a2b4-0000-7000-8000-000000000001:41-62").expect_err("a line pointer");
        assert!(err.contains("line pointer"), "{err}");
    }

    #[test]
    fn arguments_map_onto_the_request() {
        let a: SearchArgs =
            serde_json::from_value(serde_json::json!({"query": "q", "limit": 3, "roles": ["tool"]})).expect("args");
        let r = a.request("ns".into());
        assert_eq!((r.namespace.as_str(), r.limit, r.with_text), ("ns", 3, true));
        assert_eq!(r.filter.expect("filter").roles, ["tool"]);
        let typo = serde_json::from_value::<SearchArgs>(serde_json::json!({"query": "q", "limt": 3}));
        assert!(typo.expect_err("unknown field").to_string().contains("limt"));
    }

    #[test]
    fn memory_arguments_map_onto_the_requests() {
        let a: ExpandTopicArgs =
            serde_json::from_value(serde_json::json!({"tag": "parser.rs", "depth": "segments"})).expect("args");
        let r = a.request("ns".into());
        assert_eq!((r.tag.as_str(), r.depth.as_str(), r.reader.as_str()), ("parser.rs", "segments", ""));
        let deep = serde_json::from_value::<ExpandTopicArgs>(serde_json::json!({"tag": "t", "depth": "deep"}));
        assert!(deep.expect_err("unknown depth").to_string().contains("deep"));

        let a: RememberWhenArgs =
            serde_json::from_value(serde_json::json!({"query": "q", "preset": "last_7_days"})).expect("args");
        let r = a.request("ns".into()).expect("request");
        assert_eq!((r.preset.as_str(), r.from), ("last_7_days", None));
        let a: RememberWhenArgs =
            serde_json::from_value(serde_json::json!({"query": "q", "from": "2025-06-01T09:00:00Z"})).expect("args");
        assert_eq!(a.request("ns".into()).expect("request").from.map(|t| t.seconds), Some(1_748_768_400));

        let a: QueryFactsArgs =
            serde_json::from_value(serde_json::json!({"fact_type": "test", "as_of": "yesterday"})).expect("args");
        let (field, why) = a.request("ns".into()).expect_err("not a time");
        assert_eq!(field, "as_of");
        assert!(why.contains("RFC 3339"), "{why}");
    }
}
