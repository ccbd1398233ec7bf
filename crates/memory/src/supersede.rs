//! Supersession (§3.4): a newer fact about the same thing marks the older one superseded, so
//! readers see the latest value. Facts of the subject-chained types (a file, a command, a test, a
//! package, an error) form one chain per subject; dialogue facts (preferences, constraints,
//! decisions) supersede the earlier ones they restate, found by shared object keywords or
//! similar vectors. The date guard holds throughout: a fact is only ever superseded by a later
//! one. Each link is a function of the set of facts, not of the order they were stored in.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::dates::may_supersede;
use crate::model::{Fact, FactType};
use crate::segment::jaccard;

/// A fact with what orders it: when, then (session, seq) for ties.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub fact: &'a Fact,
    pub session: u128,
    /// Its object's keywords are compared for dialogue facts.
    pub keywords: &'a [String],
    pub vector: Option<&'a [f32]>,
}

impl Placed<'_> {
    /// Its place in time: when, then (session, seq) for ties.
    pub fn order(&self) -> (DateTime<Utc>, u128, u64, u64) {
        (self.fact.when, self.session, self.fact.span.first, self.fact.span.last)
    }

    /// True when `self` may supersede `older` by the date guard.
    pub fn is_after(&self, older: &Placed<'_>) -> bool {
        let after = (self.session, self.fact.span.first, self.fact.span.last)
            > (older.session, older.fact.span.first, older.fact.span.last);
        may_supersede(older.fact.when, self.fact.when, after)
    }
}

/// Keyword overlap above which two dialogue facts of one kind state the same thing.
pub const RESTATES_JACCARD: f32 = 0.4;
/// Vector similarity above which two dialogue facts of one kind state the same thing.
pub const RESTATES_COSINE: f32 = 0.85;

/// Whether dialogue fact `newer` restates (and so supersedes) `older`: same type and speaker,
/// and the same subject matter.
pub fn restates(older: &Placed<'_>, newer: &Placed<'_>) -> bool {
    let (a, b) = (older.fact, newer.fact);
    if a.fact_type != b.fact_type || a.fact_type.chained_by_subject() || a.who != b.who {
        return false;
    }
    if !matches!(a.fact_type, FactType::Preference | FactType::Constraint | FactType::Decision | FactType::Personal) {
        return false;
    }
    let kw = jaccard(older.keywords, newer.keywords) >= RESTATES_JACCARD;
    let vec = match (older.vector, newer.vector) {
        (Some(x), Some(y)) => memex_rank::cosine(x, y) >= RESTATES_COSINE,
        _ => false,
    };
    kw || vec
}

/// For each fact, the index of the fact that supersedes it, if any: the next in time on its
/// subject's chain, or the earliest later dialogue fact that restates it.
pub fn supersession(facts: &[Placed<'_>]) -> Vec<Option<usize>> {
    let mut out = vec![None; facts.len()];
    let mut chains: BTreeMap<(FactType, String), Vec<usize>> = BTreeMap::new();
    for (i, p) in facts.iter().enumerate() {
        if p.fact.fact_type.chained_by_subject() && changes_state(p.fact) {
            chains.entry((p.fact.fact_type, p.fact.subject_key())).or_default().push(i);
        }
    }
    for members in chains.values_mut() {
        members.sort_by(|&a, &b| facts[a].order().cmp(&facts[b].order()));
        for w in members.windows(2) {
            if facts[w[1]].is_after(&facts[w[0]]) {
                out[w[0]] = Some(w[1]);
            }
        }
    }
    for (i, older) in facts.iter().enumerate() {
        if older.fact.fact_type.chained_by_subject() {
            continue;
        }
        let mut best: Option<usize> = None;
        for (j, newer) in facts.iter().enumerate() {
            if i != j
                && newer.is_after(older)
                && restates(older, newer)
                && best.is_none_or(|b| newer.order() < facts[b].order())
            {
                best = Some(j);
            }
        }
        out[i] = best;
    }
    out
}

/// Whether a fact is a state of its subject: a file read leaves the file as it was, so it neither
/// supersedes nor is superseded.
pub fn changes_state(f: &Fact) -> bool {
    !(f.fact_type == FactType::File && f.verb == "read")
}

/// Whether a fact held at `as_of`: it had happened, and what superseded it had not yet.
pub fn held_at(fact: &Fact, superseded_at: Option<DateTime<Utc>>, as_of: DateTime<Utc>) -> bool {
    fact.when <= as_of && superseded_at.is_none_or(|t| t > as_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SeqSpan, TemporalStatus};
    use chrono::TimeZone;

    fn f(t: FactType, subject: &str, verb: &str, secs: i64, seq: u64) -> Fact {
        Fact {
            fact_type: t,
            subject: subject.into(),
            verb: verb.into(),
            object: String::new(),
            what: format!("{subject} {verb}"),
            who: "user".into(),
            when: Utc.timestamp_opt(secs, 0).single().expect("a time"),
            place: String::new(),
            why: String::new(),
            status: TemporalStatus::Active,
            span: SeqSpan::one(seq),
        }
    }

    #[test]
    fn chains_follow_time_whatever_the_order_given() {
        let facts = [
            f(FactType::Test, "tests/a.py::t", "passed", 300, 30),
            f(FactType::Test, "tests/a.py::t", "failed", 100, 10),
            f(FactType::Test, "tests/b.py::t", "failed", 200, 20),
            f(FactType::Test, "./tests/a.py::t ", "failed", 200, 20),
        ];
        let placed: Vec<Placed> =
            facts.iter().map(|fact| Placed { fact, session: 1, keywords: &[], vector: None }).collect();
        let s = supersession(&placed);
        assert_eq!(s, vec![None, Some(3), None, Some(0)]);
    }

    #[test]
    fn reading_a_file_changes_nothing() {
        let facts = [
            f(FactType::File, "a.rs", "created", 100, 1),
            f(FactType::File, "a.rs", "read", 200, 2),
            f(FactType::File, "a.rs", "edited", 300, 3),
        ];
        let placed: Vec<Placed> =
            facts.iter().map(|fact| Placed { fact, session: 1, keywords: &[], vector: None }).collect();
        assert_eq!(supersession(&placed), vec![Some(2), None, None]);
    }

    #[test]
    fn dialogue_facts_supersede_what_they_restate_and_never_go_back_in_time() {
        let facts = [
            f(FactType::Preference, "user", "prefers", 100, 1),
            f(FactType::Preference, "user", "prefers", 200, 5),
            f(FactType::Preference, "user", "prefers", 300, 9),
        ];
        let kw_a = vec!["indent".to_string(), "tab".to_string()];
        let kw_b = vec!["indent".to_string(), "space".to_string(), "tab".to_string()];
        let kw_c = vec!["coffe".to_string()];
        let placed = [
            Placed { fact: &facts[0], session: 1, keywords: &kw_a, vector: None },
            Placed { fact: &facts[1], session: 1, keywords: &kw_b, vector: None },
            Placed { fact: &facts[2], session: 1, keywords: &kw_c, vector: None },
        ];
        assert_eq!(supersession(&placed), vec![Some(1), None, None]);
        let at = |s| Utc.timestamp_opt(s, 0).single().expect("a time");
        assert!(held_at(&facts[0], Some(at(200)), at(150)));
        assert!(!held_at(&facts[0], Some(at(200)), at(250)));
        assert!(!held_at(&facts[0], None, at(50)));
    }
}
