//! Verb expansion for fact queries (§3.5): a query's verb also finds the facts whose verb is a
//! synonym (manual clusters, compared by stem) or, when the shell has vectors, whose verb's
//! vector is close (cosine ≥ 0.53).

/// Verbs that mean the same to a reader, each cluster led by the verb the extractor writes.
pub const CLUSTERS: &[&[&str]] = &[
    &["created", "create", "add", "added", "write", "wrote", "new", "make", "generate", "scaffold"],
    &[
        "edited", "edit", "modify", "modified", "change", "changed", "update", "updated", "patch", "patched",
        "rewrite", "refactor", "replace",
    ],
    &["deleted", "delete", "remove", "removed", "rm", "drop", "erase"],
    &["read", "open", "opened", "view", "viewed", "inspect", "look"],
    &["failed", "fail", "broke", "break", "crash", "crashed", "error", "errored", "red"],
    &["passed", "pass", "succeed", "succeeded", "green", "work", "worked"],
    &["succeeded", "passed", "ran", "run", "execute", "executed", "work", "worked"],
    &["installed", "install", "add dependency", "depend", "require"],
    &["seen", "see", "saw", "hit", "encounter", "encountered", "raise", "raised", "throw", "threw", "got"],
    &["resolved", "resolve", "fix", "fixed", "solve", "solved", "address", "addressed", "close", "closed"],
    &["decided", "decide", "choose", "chose", "pick", "picked", "settle", "settled", "opt", "opted", "go with"],
    &["requires", "require", "must", "need", "needs", "constrain", "forbid", "forbids"],
    &["prefers", "prefer", "like", "likes", "want", "wants", "love", "loves", "enjoy", "enjoys", "favor"],
    &["corrected", "correct", "clarify", "clarified", "object", "objected"],
    &[
        "experienced",
        "visited",
        "visit",
        "went",
        "go",
        "returned from",
        "got back",
        "travel",
        "travelled",
        "attended",
        "hiked",
        "completed",
        "finished",
        "started",
        "joined",
    ],
];

fn stems(v: &str) -> String {
    memex_rank::tokenize(v).join(" ")
}

/// The verbs a query's verb stands for: its own, and every verb of each cluster it is in
/// (compared by stem, so "fails" finds the "failed" cluster).
pub fn expand_verb(verb: &str) -> Vec<String> {
    let key = stems(verb.trim());
    let mut out = vec![verb.trim().to_lowercase()];
    for c in CLUSTERS {
        if c.iter().any(|m| stems(m) == key) {
            for m in *c {
                let m = m.to_string();
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        }
    }
    out
}

/// Cosine at or above which a known verb is taken as the query's (§3.5).
pub const VERB_COSINE: f32 = 0.53;

/// Known verbs whose vectors are close to the query verb's.
pub fn close_verbs<'a>(query: &[f32], known: &'a [(String, Vec<f32>)]) -> Vec<&'a str> {
    known.iter().filter(|(_, v)| memex_rank::cosine(query, v) >= VERB_COSINE).map(|(k, _)| k.as_str()).collect()
}

/// Whether a fact's verb is one of the expanded query verbs (by stem).
pub fn verb_matches(fact_verb: &str, expanded: &[String]) -> bool {
    let key = stems(fact_verb);
    expanded.iter().any(|v| stems(v) == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_expand_by_cluster_and_stem() {
        let e = expand_verb("fails");
        assert!(e.contains(&"failed".to_string()) && e.contains(&"crashed".to_string()));
        assert!(verb_matches("failed", &expand_verb("broke")));
        assert!(!verb_matches("passed", &expand_verb("broke")));
        assert!(verb_matches("experienced", &expand_verb("visited")));
        assert_eq!(expand_verb("frobnicate"), vec!["frobnicate"]);
    }
}
