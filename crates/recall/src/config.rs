//! `[memory]`: the memory worker, its interpreter and the reader tools' defaults.
use memex_memory::{SegmentConfig, SummaryConfig, TopicConfig};
use serde::{Deserialize, Serialize};

/// Which interpreter reads turns and segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterpreterKind {
    /// No model, no network, deterministic (the default).
    #[default]
    Heuristic,
    /// An OpenAI-compatible `/v1/chat/completions` server (`[memory.openai]`).
    Openai,
}

/// An OpenAI-compatible chat model, in the embedding provider's style.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// E.g. `http://127.0.0.1:8000` (the server's `/v1/chat/completions` is called).
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set (redacted when the config is printed).
    pub api_key: String,
    pub timeout_secs: u64,
    /// Turns of lookback shown to the tagger (§3.2: up to 5).
    pub lookback: usize,
    /// Below this cosine between a turn and its lookback, the lookback is not shown (the bleed
    /// gate, §3.2).
    pub bleed_gate: f32,
    /// Most tags in use listed to the tagger.
    pub vocabulary: usize,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: String::new(),
            model: String::new(),
            api_key: String::new(),
            timeout_secs: 60,
            lookback: 5,
            bleed_gate: 0.1,
            vocabulary: 30,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Derive memory at all (the worker runs in `all` and `worker` roles; the reader RPCs answer
    /// `FAILED_PRECONDITION` when off).
    pub enabled: bool,
    pub interpreter: InterpreterKind,
    pub openai: OpenAiConfig,
    /// Sessions claimed per round.
    pub claim_sessions: u32,
    /// Jobs (sessions) worked on at once: one job's Postgres round trips overlap another's
    /// interpreting. Jobs of one namespace take turns only where they link the same facts.
    pub jobs_in_flight: u32,
    /// Most new events read per session per job.
    pub events_per_job: u32,
    /// Pause when there is nothing to do, in milliseconds.
    pub poll_interval_ms: u64,
    /// A session's next job waits this long after its last one ended (milliseconds), unless a
    /// full job's events (`events_per_job`) are waiting: a live session is read a second of
    /// appends at a time, not once per append (each job's fixed Postgres round trips were most of
    /// the worker's load under a fleet's single appends). 0: as soon as an event arrives.
    pub settle_ms: u64,
    /// An idle worker reads every session to find work only after news of an append (from any
    /// replica), while its last work or news is recent (`settle_ms`, `idle_close_secs`), and at
    /// least this often (milliseconds): for what no append announces (a crashed replica's lease).
    pub idle_rescan_ms: u64,
    /// How long a claim keeps other replicas off a session, in seconds.
    pub lease_secs: u64,
    /// A session quiet for this long has its last turn closed (seconds); an event arriving after
    /// such a spell opens a new turn. 0 closes a turn as soon as it is read (tests, benches: the
    /// result then depends on when the worker ran).
    pub idle_close_secs: u64,
    /// Least time between two topic rebuilds of one namespace (milliseconds).
    pub topic_interval_ms: u64,
    /// The worker vacuums and analyzes `memory_facts` and `memory_fact_keywords` after writing
    /// this many facts (at most every ten seconds; 0: leave it to autovacuum). A backlog updates
    /// nearly every fact it writes (its supersession link), and until autovacuum's first visit
    /// (it looks once a minute) the reads under a speaker's lock walked dead versions and made a
    /// heap fetch per entry: the worker read 300-600 events/s instead of 2,200.
    pub vacuum_every_facts: u64,
    /// Most of one core the worker may use, in (0, 1].
    pub worker_share: f64,
    /// A reader's working-set budget, in tokens (§3.6).
    pub working_set_tokens: usize,
    /// Segments shown per topic at `segments` depth, at most, newest first.
    pub topic_segments: usize,
    pub segment: SegmentConfig,
    pub summary: SummaryConfig,
    pub topics: TopicConfig,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            interpreter: InterpreterKind::Heuristic,
            openai: OpenAiConfig::default(),
            claim_sessions: 16,
            jobs_in_flight: 2,
            events_per_job: 2_000,
            poll_interval_ms: 500,
            settle_ms: 1_000,
            idle_rescan_ms: 10_000,
            lease_secs: 120,
            idle_close_secs: 30,
            topic_interval_ms: 2_000,
            vacuum_every_facts: 500,
            worker_share: 1.0,
            working_set_tokens: memex_memory::paging::DEFAULT_BUDGET,
            topic_segments: 50,
            segment: SegmentConfig::default(),
            summary: SummaryConfig::default(),
            topics: TopicConfig::default(),
        }
    }
}

impl MemoryConfig {
    /// What is wrong with this configuration, naming the key.
    pub fn check(&self) -> Result<(), String> {
        if self.interpreter == InterpreterKind::Openai
            && (self.openai.base_url.is_empty() || self.openai.model.is_empty())
        {
            return Err(
                "memory.openai.base_url and memory.openai.model are required with memory.interpreter = \"openai\""
                    .into(),
            );
        }
        if !(self.worker_share > 0.0 && self.worker_share <= 1.0) {
            return Err(format!("memory.worker_share: must be in (0, 1], got {}", self.worker_share));
        }
        if self.events_per_job == 0 || self.claim_sessions == 0 || self.jobs_in_flight == 0 {
            return Err(
                "memory.events_per_job, memory.claim_sessions and memory.jobs_in_flight must be at least 1".into()
            );
        }
        if !(0.0..=1.0).contains(&self.segment.split_below) || !(0.0..=1.0).contains(&self.segment.merge_back) {
            return Err("memory.segment.split_below and merge_back must be in 0..=1".into());
        }
        if self.segment.max_turns == 0 {
            return Err("memory.segment.max_turns must be at least 1".into());
        }
        if self.summary.min_tokens > self.summary.max_tokens || !(0.0..=1.0).contains(&self.summary.ratio) {
            return Err("memory.summary: ratio in 0..=1 and min_tokens <= max_tokens".into());
        }
        if self.working_set_tokens < 1_000 {
            return Err(format!("memory.working_set_tokens: at least 1000, got {}", self.working_set_tokens));
        }
        Ok(())
    }

    /// The interpreter's name as status reports it.
    pub fn interpreter_name(&self) -> String {
        match self.interpreter {
            InterpreterKind::Heuristic => "heuristic".into(),
            InterpreterKind::Openai => format!("openai:{}", self.openai.model),
        }
    }
}
