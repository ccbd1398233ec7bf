//! The memory interpreter: what reads meaning into turns and segments. Two implementations sit
//! behind this trait, chosen by configuration: [`Heuristic`] (the default: no model, no network,
//! deterministic) and, in `memex-recall`, one that asks an OpenAI-compatible chat model. What
//! they share — segmentation, set cover, supersession and its date guard, paging — is decided
//! outside the trait, so both give memories of one shape.
use memex_tokens::TokenCounter;

use crate::model::{Fact, Summary, Turn};
use crate::summary::{SummaryConfig, summarize_segment};
use crate::tags::tag_turns;

/// A turn as the interpreter read it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnReading {
    /// Its tags, normalised, most specific first.
    pub tags: Vec<String>,
    /// Facts it signals (§3.4 phase 1), to be consolidated with the whole segment in view.
    pub signals: Vec<Fact>,
}

/// A turn before those being read: its tags and, when the caller has its events at hand, the
/// turn itself (an LLM reads its text; the heuristic needs only the tags).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Lookback {
    pub turn: Option<Turn>,
    pub tags: Vec<String>,
}

/// Why an interpretation failed. The worker retries later; the events are untouched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpretError {
    #[error("the model is unavailable: {0}")]
    Unavailable(String),
    #[error("the model answered with something unusable: {0}")]
    BadAnswer(String),
}

/// What supersession verification decided for a candidate pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The newer fact replaces the older one.
    Supersedes,
    /// Both hold.
    Distinct,
}

pub trait Interpreter: Send + Sync {
    /// `heuristic`, `openai`: what status and metrics call it.
    fn name(&self) -> &'static str;

    /// Tags and fact signals for each of `turns`. `lookback` are the turns just before them,
    /// oldest first (§3.2: up to 5), `vocabulary` tags already in use, most used first.
    fn read_turns(
        &self,
        turns: &[Turn],
        lookback: &[Lookback],
        vocabulary: &[String],
    ) -> Result<Vec<TurnReading>, InterpretError>;

    /// A segment's summary, aiming at `target_tokens`.
    fn summarize(&self, turns: &[Turn], segment_tokens: usize) -> Result<Summary, InterpretError>;

    /// The segment's final facts from its turns' signals (§3.4 phase 2). The heuristic signals
    /// nothing: its facts come from the extractor, event by event.
    fn consolidate(&self, turns: &[Turn], signals: Vec<Fact>) -> Result<Vec<Fact>, InterpretError>;

    /// Whether `newer` really supersedes `older` (a candidate pair the shared code found).
    fn verify(&self, older: &Fact, newer: &Fact) -> Result<Verdict, InterpretError>;
}

/// The default interpreter: tags from what turns name, extractive summaries, facts from the
/// extractor, supersession by the candidate rules alone.
pub struct Heuristic {
    pub summary: SummaryConfig,
    pub counter: Box<dyn TokenCounter>,
}

impl Interpreter for Heuristic {
    fn name(&self) -> &'static str {
        "heuristic"
    }

    fn read_turns(
        &self,
        turns: &[Turn],
        lookback: &[Lookback],
        _vocabulary: &[String],
    ) -> Result<Vec<TurnReading>, InterpretError> {
        let tags: Vec<Vec<String>> = lookback.iter().map(|l| l.tags.clone()).collect();
        Ok(tag_turns(turns, &tags).into_iter().map(|tags| TurnReading { tags, signals: Vec::new() }).collect())
    }

    fn summarize(&self, turns: &[Turn], segment_tokens: usize) -> Result<Summary, InterpretError> {
        Ok(summarize_segment(turns, segment_tokens, &self.summary, self.counter.as_ref()))
    }

    fn consolidate(&self, _turns: &[Turn], signals: Vec<Fact>) -> Result<Vec<Fact>, InterpretError> {
        Ok(signals)
    }

    fn verify(&self, _older: &Fact, _newer: &Fact) -> Result<Verdict, InterpretError> {
        Ok(Verdict::Supersedes)
    }
}
