//! Planner and executor on one store: delegation, reports with provenance, watching reports, and
//! the packs each level gets.
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_tests::server_or_skip;
use tokio_stream::StreamExt;

use crate::compaction::{call, output};
use crate::packs::{assert_within_budget, budgets};
use crate::task_state::state;
use crate::{assert_status, ev, fixture};

fn event_ptr(id: &str) -> pb::Pointer {
    pb::Pointer { target: Some(pb::pointer::Target::EventId(id.into())) }
}

fn delegate(parent: &str, task: &str, pointers: Vec<pb::Pointer>) -> pb::DelegateRequest {
    pb::DelegateRequest {
        namespace: "plan".into(),
        parent_task_id: parent.into(),
        task_id: task.into(),
        objective: "make separability_matrix handle nested CompoundModels".into(),
        constraints: vec!["keep the public API".into()],
        acceptance_criteria: vec!["test_separable.py passes".into()],
        pointers,
        plan_node_ref: "plan/step-2".into(),
        ..Default::default()
    }
}

fn report(task: &str, session: &str, pointers: Vec<pb::Pointer>) -> pb::ReportRequest {
    pb::ReportRequest {
        namespace: "plan".into(),
        task_id: task.into(),
        session_id: session.into(),
        status: "succeeded".into(),
        summary: "Fixed _cstack: it now copies the right operand's matrix. Tests pass.".into(),
        pointers,
        report_id: String::new(),
    }
}

#[tokio::test]
async fn delegate_report_watch_and_level_specific_packs() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "plan").await;
    let mut st = state("ship the separability fix");
    st.phase = pb::Phase::Planning as i32;
    f.put_state("root", 0, st).await.unwrap();
    let planner = f.task_session("root", "planner").await;
    let decided = f
        .append_to(
            &planner,
            vec![ev("decision", "split the work: executor fixes _cstack"), ev("constraint", "no new dependencies")],
            "",
        )
        .await;

    // Delegation creates the child task; every pointer must resolve.
    let bad = f.c.tasks.delegate(delegate("root", "child-1", vec![event_ptr(&uuid::Uuid::now_v7().to_string())])).await;
    assert_status(bad, tonic::Code::InvalidArgument, "pointers[0].event_id");
    assert_status(
        f.c.tasks.delegate(delegate("nope", "child-1", vec![])).await,
        tonic::Code::NotFound,
        "parent_task_id",
    );
    let mut empty = delegate("root", "child-1", vec![]);
    empty.objective.clear();
    assert_status(f.c.tasks.delegate(empty).await, tonic::Code::InvalidArgument, "objective");
    let d =
        f.c.tasks
            .delegate(delegate("root", "child-1", vec![event_ptr(&decided.event_ids[0])]))
            .await
            .unwrap()
            .into_inner();
    assert_eq!(
        (d.task_id.as_str(), d.parent_task_id.as_str(), d.plan_node_ref.as_str()),
        ("child-1", "root", "plan/step-2")
    );
    let child_state = d.task_state.unwrap();
    assert_eq!(child_state.version, 1);
    let cs = child_state.state.unwrap();
    assert_eq!(cs.goals, vec!["make separability_matrix handle nested CompoundModels"]);
    assert_eq!(cs.phase, pb::Phase::Execution as i32);
    assert_eq!(cs.premises, vec!["python 3.9"], "premises are inherited");
    assert_eq!(cs.key_pointers, vec![event_ptr(&decided.event_ids[0])]);
    assert_status(f.c.tasks.delegate(delegate("root", "child-1", vec![])).await, tonic::Code::AlreadyExists, "child-1");

    // The planner watches from the start.
    let mut watch =
        f.c.tasks
            .watch_reports(pb::WatchReportsRequest {
                namespace: "plan".into(),
                parent_task_id: "root".into(),
                after_seq: 0,
            })
            .await
            .unwrap()
            .into_inner();

    // The executor works and reports with provenance.
    let exec = f.task_session("child-1", "executor").await;
    let work = f
        .append_to(
            &exec,
            vec![call("t1", "pytest astropy/modeling/tests/test_separable.py"), output("t1", "12 passed in 0.8s")],
            "",
        )
        .await;
    assert_status(
        f.c.tasks.report(report("child-1", &exec, vec![event_ptr(&uuid::Uuid::now_v7().to_string())])).await,
        tonic::Code::InvalidArgument,
        "pointers[0].event_id",
    );
    assert_status(f.c.tasks.report(report("child-1", &exec, vec![])).await, tonic::Code::InvalidArgument, "pointers");
    let mut bad_status = report("child-1", &exec, vec![event_ptr(&work.event_ids[1])]);
    bad_status.status = "done".into();
    assert_status(f.c.tasks.report(bad_status).await, tonic::Code::InvalidArgument, "status");
    let span = pb::Pointer {
        target: Some(pb::pointer::Target::Span(pb::Span { session_id: exec.clone(), first_seq: 1, last_seq: 99 })),
    };
    assert_status(
        f.c.tasks.report(report("child-1", &exec, vec![span])).await,
        tonic::Code::InvalidArgument,
        "pointers[0].span",
    );
    let art = pb::Pointer { target: Some(pb::pointer::Target::ArtifactId(format!("blake3:{}", "0".repeat(64)))) };
    assert_status(
        f.c.tasks.report(report("child-1", &exec, vec![art])).await,
        tonic::Code::InvalidArgument,
        "pointers[0].artifact_id",
    );
    let mut req = report("child-1", &exec, vec![event_ptr(&work.event_ids[1])]);
    req.report_id = uuid::Uuid::now_v7().to_string();
    let rep = f.c.tasks.report(req.clone()).await.unwrap().into_inner();
    assert_eq!((rep.parent_task_id.as_str(), rep.status.as_str()), ("root", "succeeded"));
    // A retried report is recorded once.
    let again = f.c.tasks.report(req).await.unwrap().into_inner();
    assert_eq!(again, rep);
    let exec_events = f.events_of(&exec).await;
    assert_eq!(exec_events.len(), 3);
    let rep_event = exec_events.iter().find(|e| e.id == rep.event_id).expect("report event");
    assert_eq!((rep_event.kind.as_str(), rep_event.task_state_version), ("report", 1));
    assert!(rep_event.content.starts_with("report on task child-1: succeeded\nFixed _cstack"));

    let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(first, rep);
    // A second executor reports later; the watcher hears it without polling.
    f.c.tasks.delegate(delegate("root", "child-2", vec![])).await.unwrap();
    let exec2 = f.task_session("child-2", "executor-2").await;
    let w2 = f.append_to(&exec2, vec![ev("assistant_message", "docs updated")], "").await;
    let mut r2 = report("child-2", &exec2, vec![event_ptr(&w2.event_ids[0])]);
    r2.status = "partial".into();
    let rep2 = f.c.tasks.report(r2).await.unwrap().into_inner();
    let second = tokio::time::timeout(Duration::from_secs(3), watch.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(second, rep2);
    assert!(second.seq > first.seq);

    // The planner's pack: its children's reports and decisions, not their logs.
    let p = f.pack(&planner, "where do we stand?", budgets(2000, 1000)).await.unwrap();
    assert_within_budget(&p);
    assert_eq!(p.role, pb::Role::Planner as i32);
    let report_decision = p.decisions.iter().find(|d| d.event_id == rep.event_id).expect("child report is a candidate");
    assert!(report_decision.included, "{report_decision:?}");
    assert!(p.text.contains("report on task child-1: succeeded"));
    // The executor's pack: its parent's constraints reach it.
    let e = f.pack(&exec, "anything else to respect?", budgets(2000, 1000)).await.unwrap();
    assert_eq!(e.role, pb::Role::Executor as i32);
    let constraint = e.decisions.iter().find(|d| d.event_id == decided.event_ids[1]).expect("parent constraint");
    assert!(constraint.included && constraint.parts.as_ref().unwrap().task_binding == 1.0, "{constraint:?}");
}
