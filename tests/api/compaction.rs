//! Pointer-manifest compaction over gRPC: eviction order, the manifest, expansion, the window.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::task_state::state;
use crate::{Fixture, assert_status, ev, fixture};

pub fn call(id: &str, command: &str) -> pb::EventInput {
    pb::EventInput { tool_name: "Bash".into(), tool_call_id: id.into(), ..ev("tool_call", command) }
}

pub fn output(id: &str, content: &str) -> pb::EventInput {
    pb::EventInput { tool_call_id: id.into(), ..ev("tool_result", content) }
}

/// An agent loop over `steps` tool rounds with bulky outputs; step 1 fails with an exact error.
pub fn agent_loop(steps: usize) -> Vec<pb::EventInput> {
    let mut v =
        vec![ev("system", "You are a coding agent."), ev("user_message", "Fix separability_matrix for nested models.")];
    for i in 0..steps {
        let id = format!("c{i}");
        v.push(ev("assistant_message", &format!("Step {i}: let me look at file_{i}.py")));
        v.push(call(&id, &format!("grep -rn separability astropy/modeling/file_{i}.py")));
        let out = if i == 1 {
            "Traceback (most recent call last):\n  File \"astropy/modeling/separable.py\", line 3\nModuleNotFoundError: No module named 'erfa'\n".to_owned()
        } else {
            (0..120)
                .map(|l| format!("astropy/modeling/file_{i}.py:{l}: matrix[{l}] = _cstack(left, right)\n"))
                .collect()
        };
        v.push(output(&id, &out));
    }
    v.push(ev("decision", "Copy the right operand's matrix in _cstack."));
    v.push(ev("user_message", "Good. Now run the tests."));
    v.push(ev("assistant_message", "Running the tests."));
    v
}

impl Fixture {
    pub async fn compact(
        &mut self,
        session: &str,
        budget: u32,
        headroom: u32,
    ) -> Result<pb::CompactResponse, tonic::Status> {
        self.c
            .context
            .compact(pb::CompactRequest {
                namespace: self.ns.clone(),
                session_id: session.into(),
                window_budget: budget,
                headroom,
                protected_turns: Some(2),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
    }

    pub async fn expand(&mut self, manifest: &str) -> Vec<pb::Event> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .c
                .context
                .expand_manifest(pb::ExpandManifestRequest {
                    namespace: self.ns.clone(),
                    manifest_id: manifest.into(),
                    page_size: 7,
                    page_token: std::mem::take(&mut token),
                })
                .await
                .unwrap()
                .into_inner();
            out.extend(page.events);
            if page.next_page_token.is_empty() {
                return out;
            }
            token = page.next_page_token;
        }
    }

    pub async fn window(&mut self, session: &str) -> pb::Window {
        self.c
            .context
            .get_window(pb::GetWindowRequest {
                namespace: self.ns.clone(),
                session_id: session.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }
}

#[tokio::test]
async fn compaction_evicts_tool_output_first_and_loses_nothing() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "cmp").await;
    f.put_state("fix", 0, state("fix separability_matrix")).await.unwrap();
    let s = f.task_session("fix", "exec").await;
    f.append_to(&s, agent_loop(8), "").await;
    let all = f.events_of(&s).await;
    let before = f.window(&s).await;
    assert_eq!(before.events.len(), all.len());
    assert!(before.tokens > 8000, "{}", before.tokens);

    let r = f.compact(&s, 6000, 1000).await.unwrap();
    assert!(r.compacted && r.fits, "{r:?}");
    assert!(r.tokens_after <= r.target && r.target == 5000, "{r:?}");
    assert_eq!(r.index_check, "persisted and indexed");
    let m = r.manifest.clone().unwrap();
    assert_eq!(m.task_state_version, 1);
    assert!(m.tokens <= 200, "{}", m.tokens);
    assert_eq!(m.tokens as usize, memex_tokens::Tokenizer::O200kBase.count(&m.rendered));
    assert!(m.rendered.starts_with(&format!("[pointer manifest {}]", m.id)), "{}", m.rendered);
    // Only tool results were needed, oldest first.
    let evicted: Vec<&pb::Event> = all.iter().filter(|e| r.evicted_event_ids.contains(&e.id)).collect();
    assert!(
        evicted.iter().all(|e| e.kind == "tool_result"),
        "{:?}",
        evicted.iter().map(|e| &e.kind).collect::<Vec<_>>()
    );
    assert_eq!(evicted[0].seq, 5);
    // The manifest names exactly the evicted events, and they come back byte for byte.
    let named: Vec<u64> = m.spans.iter().flat_map(|s| s.first_seq..=s.last_seq).collect();
    assert_eq!(named, evicted.iter().map(|e| e.seq).collect::<Vec<_>>());
    let expanded = f.expand(&m.id).await;
    assert_eq!(expanded.iter().collect::<Vec<_>>(), evicted);
    // Tool results are shown with their call's tool.
    assert_eq!(m.hints.as_ref().unwrap().tools, vec!["Bash"]);
    assert!(
        m.anchors.iter().any(|a| a.kind == "error" && a.label == "ModuleNotFoundError: No module named 'erfa'"),
        "{:?}",
        m.anchors
    );
    assert!(m.hints.as_ref().unwrap().errors.contains(&"ModuleNotFoundError: No module named 'erfa'".to_owned()));

    // The window now holds the rest and the manifest.
    let w = f.window(&s).await;
    assert_eq!(w.version, 1);
    assert_eq!(w.manifests.len(), 1);
    assert_eq!(w.events.len(), all.len() - evicted.len());
    assert!(w.tokens as usize <= 5000);
    assert_eq!(w.evicted.iter().map(|s| s.last_seq - s.first_seq + 1).sum::<u64>(), evicted.len() as u64);
    // A window within budget is left alone.
    let again = f.compact(&s, 6000, 1000).await.unwrap();
    assert!(!again.compacted && again.fits && again.manifest.is_none());

    // More work, a tighter window: a second compaction reaches tool calls and dialogue.
    f.append_to(&s, agent_loop(4)[2..].to_vec(), "").await;
    let r2 = f.compact(&s, 2500, 500).await.unwrap();
    assert!(r2.compacted, "{r2:?}");
    let w2 = f.window(&s).await;
    assert!(w2.manifests.len() <= 2 && w2.version == 2);
    // The protected tail and the system event stayed.
    let resident: Vec<u64> = w2.events.iter().map(|e| e.seq).collect();
    assert!(resident.contains(&1), "system event evicted: {resident:?}");
    let last = f.events_of(&s).await.last().map(|e| e.seq).unwrap();
    assert!(resident.contains(&last));
    // Nothing was lost: every event is still in the store.
    assert_eq!(f.events_of(&s).await.len(), all.len() + agent_loop(4).len() - 2);
}

#[tokio::test]
async fn compaction_requests_are_checked() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "cmpbad").await;
    let s = f.session.clone();
    assert_status(f.compact(&s, 1000, 1000).await, tonic::Code::InvalidArgument, "headroom");
    assert_status(f.compact(&s, 0, 0).await, tonic::Code::InvalidArgument, "window_budget");
    assert_status(f.compact(&uuid::Uuid::now_v7().to_string(), 1000, 10).await, tonic::Code::NotFound, "session_id");
    assert_status(f.compact("nope", 1000, 10).await, tonic::Code::InvalidArgument, "session_id");
    let r =
        f.c.context
            .expand_manifest(pb::ExpandManifestRequest {
                namespace: "cmpbad".into(),
                manifest_id: uuid::Uuid::now_v7().to_string(),
                ..Default::default()
            })
            .await;
    assert_status(r, tonic::Code::NotFound, "manifest_id");
    // An empty window fits any budget.
    let ok = f.compact(&s, 100, 10).await.unwrap();
    assert!(!ok.compacted && ok.fits);
}

#[tokio::test]
async fn concurrent_compactions_of_one_window_apply_once() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "cmprace").await;
    let s = f.session.clone();
    f.append_to(&s, agent_loop(8), "").await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut c = f.c.context.clone();
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            c.compact(pb::CompactRequest {
                namespace: "cmprace".into(),
                session_id: s,
                window_budget: 6000,
                headroom: 1000,
                protected_turns: Some(2),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
        }));
    }
    let mut compacted = 0;
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        assert!(r.fits);
        compacted += usize::from(r.compacted);
    }
    assert_eq!(compacted, 1, "one compaction applies; the others find the window within budget");
    let w = f.window(&s).await;
    assert_eq!((w.version, w.manifests.len()), (1, 1));
}
