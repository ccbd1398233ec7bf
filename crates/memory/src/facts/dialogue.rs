//! Facts a user states: corrections of the agent, constraints ("never", "do not", "must"),
//! preferences ("I prefer", "please use"), and, in conversation, what happened to them and who
//! they are. Each quotes its sentence verbatim; dates it names are resolved against the message.
use std::sync::LazyLock;

use regex::Regex;

use super::fact;
use crate::dates::resolve_relative_date;
use crate::model::{Fact, FactType, MemEvent, SeqSpan, TemporalStatus};
use crate::turns::is_injected_user_text;

/// Facts read from one message, at most (a task's instructions state many rules).
const MAX_PER_MESSAGE: usize = 24;
/// Longest sentence a fact quotes (characters).
const MAX_SENTENCE: usize = 400;

macro_rules! re {
    ($name:ident, $pat:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| Regex::new($pat).expect("a valid pattern"));
    };
}

re!(
    CORRECTION,
    r"(?i)^(?:no[,.!]|no\s|nope\b|actually[,\s]|wait[,.!]|that's not\b|that is not\b|that's wrong|thats wrong|wrong[,.!]|not quite\b|incorrect\b|you misunderstood|i said\b|i meant\b|stop\b|don't do that|undo\b|revert (?:that|this|it)\b|that's incorrect)"
);
re!(
    CONSTRAINT,
    r"(?i)\b(?:must(?: not)?|mustn't|never|always|should not|shouldn't|make sure|ensure that|avoid|only use|no need to|not allowed|is required|are required)\b"
);
// "Don't", "do not", "can't" make a rule when they are said to the agent (an imperative, or
// "you"/"we" as the subject), not when they describe something ("They don't look that bad").
re!(
    NEGATED_RULE,
    r"(?i)^(?:(?:please|and|but|so|also|just)\s+)?(?:don't|do not)\b|\b(?:you|we)\s+(?:(?:really|still|also)\s+)?(?:don't|do not|can't|cannot|can not|may not)\b|\bplease (?:don't|do not)\b"
);
// Requirement words written in capitals (RFC 2119 style) are rules, as is "exactly N".
re!(EMPHATIC, r"\b(?:MUST|SHOULD|SHALL|REQUIRED|NEVER|ALWAYS)\b|(?i:\bexactly (?:one|two|three|\d+|the following)\b)");
re!(
    PREFERENCE,
    r"(?i)\b(?:i|we) (?:would |'d |really )?(?:prefer|like|love|want|rather|hate|dislike|enjoy)\b|\bplease (?:use|keep|stick|write|make)\b|\b(?:use|using) \S+ (?:instead of|rather than)\b"
);
re!(
    EXPERIENCE,
    r"(?i)\b(?:i|we) (?:just |recently |finally )?(?:went|visited|got back|returned|started|finished|completed|bought|adopted|joined|moved|signed up|ran|hiked|attended|graduated|painted|made|took|began|met|traveled|travelled|won|lost|quit)\b"
);
re!(
    PERSONAL,
    r"(?i)\b(?:i am|i'm|my name is|i work as|i work at|i live in|i have (?:a|two|three|\d+)|my (?:job|husband|wife|partner|kids?|son|daughter|dog|cat|family) (?:is|are)\b)"
);

/// The first sentence of `text` (at most `max` characters), code blocks and tags skipped.
pub fn first_sentence(text: &str, max: usize) -> String {
    sentences(text).into_iter().next().map(|s| clip(&s, max)).unwrap_or_default()
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_owned() } else { s.chars().take(max).collect::<String>() + "…" }
}

/// Sentences of prose: fenced code, quoted blocks and tag lines left out, split at `. `, `! `,
/// `? ` and line ends.
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || t.is_empty() || t.starts_with('<') || t.starts_with('>') || t.starts_with('|') {
            continue;
        }
        let t = t.trim_start_matches(['-', '*', '#', ' ']).trim();
        let mut start = 0;
        let b = t.as_bytes();
        for i in 0..b.len() {
            let end = matches!(b[i], b'.' | b'!' | b'?') && (i + 1 == b.len() || b[i + 1] == b' ');
            // Not after a single letter or a number ("e.g. ", "v1. ").
            if end && i >= start {
                let s = t[start..=i].trim();
                let short_abbrev = s.len() < 5 || s.ends_with("e.g.") || s.ends_with("i.e.") || s.ends_with("etc.");
                if !short_abbrev {
                    out.push(s.to_owned());
                    start = i + 1;
                }
            }
        }
        let rest = t[start.min(t.len())..].trim();
        if !rest.is_empty() {
            out.push(rest.to_owned());
        }
    }
    out
}

// A follow-up that tells the agent its work is not right (after a first request).
// Kept to phrases that report a result, so a new request is not taken for a correction.
re!(
    FEEDBACK,
    r"(?i)\b(?:doesn't work|does not work|didn't work|did not work|not working|still (?:doesn't|does not|not|broken|fails|failing|the same|shows|happening)|are you sure|i don't think|don't think (?:we|you|it|that)|that's not (?:it|right|what)|this is not (?:it|right|what)|isn't (?:right|working|correct)|not what i (?:asked|wanted|meant)|now (?:sounds?|looks?) the same|is broken|broke (?:it|the))\b"
);

/// The facts a user's message states; `follow_up` when a user's message came before it.
pub fn dialogue_facts(e: &MemEvent, follow_up: bool) -> Vec<Fact> {
    if is_injected_user_text(&e.content) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let span = SeqSpan::one(e.seq);
    let all = sentences(&e.content);
    let text = e.content.trim();
    if CORRECTION.is_match(text) || (follow_up && text.chars().count() <= 1_200 && FEEDBACK.is_match(text)) {
        let quoted = clip(&all.iter().take(2).cloned().collect::<Vec<_>>().join(" "), MAX_SENTENCE);
        if !quoted.is_empty() {
            out.push(fact(
                e,
                FactType::Correction,
                "user",
                "corrected",
                &quoted,
                quoted.clone(),
                TemporalStatus::Active,
                span,
            ));
        }
    }
    for s in &all {
        if out.len() >= MAX_PER_MESSAGE {
            break;
        }
        // A short lead-in ("The agent must produce:") introduces a list; it states nothing itself.
        let lead_in = s.ends_with(':') && s.split_whitespace().count() < 7;
        if s.chars().count() > MAX_SENTENCE || s.split_whitespace().count() < 3 || lead_in {
            continue;
        }
        let (t, verb, status) = if PREFERENCE.is_match(s) {
            (FactType::Preference, "prefers", TemporalStatus::Active)
        } else if CONSTRAINT.is_match(s) || NEGATED_RULE.is_match(s) || EMPHATIC.is_match(s) {
            (FactType::Constraint, "requires", TemporalStatus::Active)
        } else if EXPERIENCE.is_match(s) {
            (FactType::Experience, "experienced", TemporalStatus::Completed)
        } else if PERSONAL.is_match(s) {
            (FactType::Personal, "is", TemporalStatus::Active)
        } else {
            continue;
        };
        if out.iter().any(|f: &Fact| f.object == *s) {
            continue;
        }
        let mut f = fact(e, t, "user", verb, s, s.clone(), status, span);
        if let Some(day) = resolve_relative_date(s, e.time) {
            f.when = day;
        }
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ev;

    #[test]
    fn sentences_skip_code_and_tags() {
        let s = sentences("Fix the bug. Use e.g. nextest!\n```\nnot. this.\n```\n<tag>no</tag>\n- and this one?");
        assert_eq!(s, vec!["Fix the bug.", "Use e.g. nextest!", "and this one?"]);
    }

    #[test]
    fn users_correct_constrain_and_prefer() {
        let f = dialogue_facts(&ev(3, "user_message", "No, that's the wrong file. Edit src/b.rs instead."), true);
        assert_eq!(f[0].fact_type, FactType::Correction);
        assert_eq!(f[0].what, "No, that's the wrong file. Edit src/b.rs instead.");
        let f = dialogue_facts(&ev(3, "user_message", "Please use tabs for indentation. Never push to main."), false);
        let kinds: Vec<_> = f.iter().map(|f| (f.fact_type, f.object.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (FactType::Preference, "Please use tabs for indentation."),
                (FactType::Constraint, "Never push to main."),
            ]
        );
        assert!(
            dialogue_facts(&ev(3, "user_message", "<system-reminder>Never do x</system-reminder>"), true).is_empty()
        );
        assert!(dialogue_facts(&ev(3, "user_message", "what does this function do?"), true).is_empty());
        // A negation that describes is not a rule; one said to the agent is.
        assert!(dialogue_facts(&ev(3, "user_message", "They don't look that bad overall."), false).is_empty());
        for rule in ["Don't touch the tests.", "Please do not push to main.", "We can't use nightly here."] {
            let f = dialogue_facts(&ev(3, "user_message", rule), false);
            assert_eq!(f.iter().map(|f| f.fact_type).collect::<Vec<_>>(), vec![FactType::Constraint], "{rule}");
        }
        // Feedback on the agent's work is a correction, but only after a first request.
        let msg = "Still doesn't work, maybe there's a step needed to enable it";
        assert_eq!(dialogue_facts(&ev(9, "user_message", msg), true)[0].fact_type, FactType::Correction);
        assert!(dialogue_facts(&ev(1, "user_message", msg), false).is_empty());
    }
}
