//! A file that shrank or was rewritten becomes a new version: a new session linked to the old
//! one, which keeps what it had.

use crate::{Env, after_lines, append, fixture};

fn metadata(s: &memex_proto::v1::Session) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(&s.metadata_json).unwrap()["memex_watch"].clone()
}

#[tokio::test]
async fn truncated_and_rewritten_files_become_new_versions() {
    let Some(env) = Env::new("versions").await else { return };
    let short = fixture("claude-code", "spotter__short.jsonl");
    let heavy = fixture("claude-code", "spotter__tool_heavy.jsonl");
    let file = env.dir.join("s.jsonl");
    append(&file, &short);
    env.once(&[]).await;
    let v1 = env.session_of(&file, 1);
    let imported_short = env.import(&short, "s.jsonl").await;
    env.assert_same(&v1, &imported_short).await;
    let v1_count = env.session(&v1).await.unwrap().event_count;

    // Truncated, then written anew: shorter than what was stored.
    let cut = after_lines(&heavy, 8);
    std::fs::write(&file, &heavy[..cut]).unwrap();
    assert!(cut < short.len());
    let out = env.once(&[]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("version 2"), "{}", String::from_utf8_lossy(&out.stderr));
    let v2 = env.session_of(&file, 2);
    let s2 = env.session(&v2).await.expect("a second version");
    assert_eq!(metadata(&s2)["previous_session_id"], v1.as_str());
    assert_eq!(metadata(&s2)["version"], 2);
    env.assert_same(&v2, &env.import(&heavy[..cut], "s.jsonl").await).await;
    assert_eq!(env.session(&v1).await.unwrap().event_count, v1_count, "the old version is kept as it was");

    // Rewritten in place, same length, one byte changed before the resume point, then grown.
    let mut edited = heavy[..cut].to_vec();
    let at = edited.windows(4).position(|w| w == b"\"ls\"" || w == b"user").unwrap();
    edited[at + 1] = edited[at + 1].to_ascii_uppercase();
    edited.extend_from_slice(&heavy[cut..]);
    std::fs::write(&file, &edited).unwrap();
    env.once(&[]).await;
    let v3 = env.session_of(&file, 3);
    let s3 = env.session(&v3).await.expect("a third version");
    assert_eq!(metadata(&s3)["previous_session_id"], v2.as_str());
    env.assert_same(&v3, &env.import(&edited, "s.jsonl").await).await;

    // Grown only: the same version takes the rest, and a fourth run adds nothing.
    let before = env.session(&v3).await.unwrap().event_count;
    append(&file, &short);
    env.once(&[]).await;
    env.once(&[]).await;
    assert!(env.session(&env.session_of(&file, 4)).await.is_none());
    let grown = [edited.as_slice(), short.as_slice()].concat();
    env.assert_same(&v3, &env.import(&grown, "s.jsonl").await).await;
    assert!(env.session(&v3).await.unwrap().event_count > before);
}
