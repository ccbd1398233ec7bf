//! StreamEvents: acknowledged ranges, atomic messages, errors that name the message.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::{call, ev, fixture, result};

fn msg(ns: &str, session: &str, events: Vec<pb::EventInput>) -> pb::StreamEventsRequest {
    pb::StreamEventsRequest { namespace: ns.into(), session_id: session.into(), events, idempotency_key: String::new() }
}

#[tokio::test]
async fn streamed_messages_are_committed_in_order_and_acknowledged() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "stream").await;
    let mut messages = vec![msg(&f.ns, &f.session, vec![ev("user_message", "go"), call("c1")])];
    for i in 0..200 {
        // Later messages inherit namespace and session.
        messages.push(msg("", "", vec![ev("note", &format!("m{i}"))]));
    }
    messages.push(msg("", "", vec![result("c1", "answer to a call from message 0")]));
    let n_msgs = messages.len() as u64;
    let acks: Vec<pb::StreamEventsAck> =
        f.c.events
            .stream_events(tokio_stream::iter(messages))
            .await
            .unwrap()
            .into_inner()
            .map(|a| a.unwrap())
            .collect()
            .await;
    let last = acks.last().unwrap();
    assert_eq!(last.messages_committed, n_msgs);
    assert_eq!(last.events_committed, 203);
    assert_eq!(last.last_seq, 203);
    // Acks are cumulative and their seq ranges tile 1..=203.
    let mut next = 1;
    for a in &acks {
        assert_eq!(a.first_seq, next);
        next = a.last_seq + 1;
    }
    assert!(acks.windows(2).all(|w| w[0].messages_committed < w[1].messages_committed));
    let events = f.all_events().await;
    assert_eq!(events.len(), 203);
    assert_eq!(events[2].content, "m0");
    assert_eq!(events[202].tool_call_id, "c1");
}

#[tokio::test]
async fn a_bad_message_ends_the_stream_after_committing_everything_before_it() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "stream-bad").await;
    let messages = vec![
        msg(&f.ns, &f.session, vec![ev("note", "a")]),
        msg("", "", vec![ev("note", "b"), ev("note", "c")]),
        msg("", "", vec![ev("note", "d"), ev("bogus", "e")]),
        msg("", "", vec![ev("note", "never")]),
    ];
    let mut stream = f.c.events.stream_events(tokio_stream::iter(messages)).await.unwrap().into_inner();
    let mut committed = 0;
    let err = loop {
        match stream.message().await {
            Ok(Some(ack)) => committed = ack.messages_committed,
            Ok(None) => panic!("the stream should end with an error"),
            Err(s) => break s,
        }
    };
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("messages[2].events[1].kind"), "{}", err.message());
    assert_eq!(committed, 2);
    let contents: Vec<String> = f.all_events().await.into_iter().map(|e| e.content).collect();
    assert_eq!(contents, vec!["a", "b", "c"]);
}

#[tokio::test]
async fn a_stream_without_a_namespace_is_refused() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "stream-ns").await;
    let r = f.c.events.stream_events(tokio_stream::iter(vec![msg("", &f.session, vec![ev("note", "x")])])).await;
    crate::assert_status(r.map(|_| ()), tonic::Code::InvalidArgument, "namespace");
}

use futures::StreamExt;
