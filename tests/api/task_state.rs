//! Task state: versions, compare-and-swap, the token cap, and the version recorded on events.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::{Fixture, assert_status, ev, fixture};

pub fn state(goal: &str) -> pb::TaskState {
    pb::TaskState {
        goals: vec![goal.into()],
        constraints: vec!["do not change the public API".into()],
        next_actions: vec!["run the separability tests".into()],
        phase: pb::Phase::Execution as i32,
        premises: vec!["python 3.9".into()],
        ..Default::default()
    }
}

impl Fixture {
    pub async fn put_state(
        &mut self,
        task: &str,
        expected: u64,
        state: pb::TaskState,
    ) -> Result<pb::TaskStateVersion, tonic::Status> {
        self.c
            .tasks
            .update_task_state(pb::UpdateTaskStateRequest {
                namespace: self.ns.clone(),
                task_id: task.into(),
                expected_version: expected,
                state: Some(state),
                author: "planner".into(),
                tokenizer: String::new(),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// A session of `task` (the fixture's own session has none).
    pub async fn task_session(&mut self, task: &str, agent: &str) -> String {
        self.c
            .sessions
            .create_session(pb::CreateSessionRequest {
                namespace: self.ns.clone(),
                agent_id: agent.into(),
                task_id: task.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .id
    }

    pub async fn append_to(
        &mut self,
        session: &str,
        events: Vec<pb::EventInput>,
        key: &str,
    ) -> pb::AppendEventsResponse {
        self.c
            .events
            .append_events(pb::AppendEventsRequest {
                namespace: self.ns.clone(),
                session_id: session.into(),
                events,
                idempotency_key: key.into(),
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn events_of(&mut self, session: &str) -> Vec<pb::Event> {
        self.c
            .events
            .get_events(pb::GetEventsRequest {
                namespace: self.ns.clone(),
                session_id: session.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .events
    }
}

#[tokio::test]
async fn versions_are_compare_and_swap_and_all_kept() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "ts").await;
    let v1 = f.put_state("fix-sep", 0, state("fix separability_matrix")).await.unwrap();
    assert_eq!((v1.task_id.as_str(), v1.version, v1.tokenizer.as_str()), ("fix-sep", 1, "o200k_base"));
    assert!(v1.rendered.starts_with("## task state fix-sep v1 · phase execution\n"), "{}", v1.rendered);
    assert_eq!(v1.tokens as usize, memex_tokens::Tokenizer::O200kBase.count(&v1.rendered));
    let v2 = f.put_state("fix-sep", 1, state("fix separability_matrix for nested models")).await.unwrap();
    assert_eq!(v2.version, 2);
    // A writer that read v1 loses the race.
    assert_status(
        f.put_state("fix-sep", 1, state("stale")).await,
        tonic::Code::FailedPrecondition,
        "at version 2, not 1",
    );
    assert_status(f.put_state("fix-sep", 0, state("again")).await, tonic::Code::FailedPrecondition, "expected_version");
    assert_status(f.put_state("new-task", 4, state("x")).await, tonic::Code::FailedPrecondition, "no state yet");
    // Every version is kept.
    let get = |version: u64| pb::GetTaskStateRequest { namespace: "ts".into(), task_id: "fix-sep".into(), version };
    let old = f.c.tasks.get_task_state(get(1)).await.unwrap().into_inner();
    assert_eq!(old, v1);
    let cur = f.c.tasks.get_task_state(get(0)).await.unwrap().into_inner();
    assert_eq!(cur, v2);
    assert_status(f.c.tasks.get_task_state(get(3)).await, tonic::Code::NotFound, "no version 3");
    let history =
        f.c.tasks
            .list_task_state_versions(pb::ListTaskStateVersionsRequest {
                namespace: "ts".into(),
                task_id: "fix-sep".into(),
                page_size: 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(history.versions, vec![v2.clone()]);
    let rest =
        f.c.tasks
            .list_task_state_versions(pb::ListTaskStateVersionsRequest {
                namespace: "ts".into(),
                task_id: "fix-sep".into(),
                page_size: 1,
                page_token: history.next_page_token,
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(rest.versions, vec![v1]);
    assert!(rest.next_page_token.is_empty());
    // Concurrent writers from the same version: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut c = f.c.tasks.clone();
        tasks.push(tokio::spawn(async move {
            c.update_task_state(pb::UpdateTaskStateRequest {
                namespace: "ts".into(),
                task_id: "fix-sep".into(),
                expected_version: 2,
                state: Some(state(&format!("writer {i}"))),
                ..Default::default()
            })
            .await
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(v) => {
                assert_eq!(v.into_inner().version, 3);
                won += 1;
            }
            Err(s) => assert_eq!(s.code(), tonic::Code::FailedPrecondition),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test]
async fn bad_states_are_refused_with_the_field_named() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "tsbad").await;
    let mut s = state("g");
    s.goals.push(String::new());
    assert_status(f.put_state("t", 0, s).await, tonic::Code::InvalidArgument, "state.goals[1]: is empty");
    let mut s = state("g");
    s.open_loops =
        (0..60).map(|i| format!("open loop {i}: why does the nested compound model lose separability?")).collect();
    assert_status(f.put_state("t", 0, s).await, tonic::Code::InvalidArgument, "over the task-state cap of 800");
    let mut s = state("g");
    s.key_pointers = vec![pb::Pointer { target: Some(pb::pointer::Target::EventId(uuid::Uuid::now_v7().to_string())) }];
    assert_status(f.put_state("t", 0, s).await, tonic::Code::InvalidArgument, "state.key_pointers[0].event_id");
    let mut s = state("g");
    s.key_pointers = vec![pb::Pointer { target: None }];
    assert_status(f.put_state("t", 0, s).await, tonic::Code::InvalidArgument, "state.key_pointers[0]");
    let mut s = state("g");
    s.phase = 9;
    assert_status(f.put_state("t", 0, s).await, tonic::Code::InvalidArgument, "state.phase");
    assert_status(f.put_state("", 0, state("g")).await, tonic::Code::InvalidArgument, "task_id: is required");
    let r =
        f.c.tasks
            .update_task_state(pb::UpdateTaskStateRequest {
                namespace: "tsbad".into(),
                task_id: "t".into(),
                state: Some(state("g")),
                tokenizer: "gpt2".into(),
                ..Default::default()
            })
            .await;
    assert_status(r, tonic::Code::InvalidArgument, "tokenizer");
    let missing =
        f.c.tasks
            .get_task_state(pb::GetTaskStateRequest { namespace: "tsbad".into(), task_id: "nope".into(), version: 0 })
            .await;
    assert_status(missing, tonic::Code::NotFound, "task_id: task \"nope\"");
}

#[tokio::test]
async fn events_record_the_task_state_version_they_were_written_under() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "tsev").await;
    let s = f.task_session("t1", "exec").await;
    f.append_to(&s, vec![ev("note", "before any state")], "").await;
    f.put_state("t1", 0, state("g")).await.unwrap();
    f.append_to(&s, vec![ev("note", "under v1 (group commit)")], "").await;
    f.append_to(&s, vec![ev("note", "under v1 (keyed: own statement)")], "k1").await;
    f.put_state("t1", 1, state("g2")).await.unwrap();
    let mut other = ev("note", "an event naming another task");
    other.task_id = "t-other".into();
    f.append_to(&s, vec![ev("note", "under v2"), other], "").await;
    let versions: Vec<u64> = f.events_of(&s).await.iter().map(|e| e.task_state_version).collect();
    assert_eq!(versions, vec![0, 1, 1, 2, 0]);
    // A session without a task records none.
    let plain = f.session.clone();
    f.append_to(&plain, vec![ev("note", "no task")], "").await;
    assert_eq!(f.events_of(&plain).await[0].task_state_version, 0);
}
