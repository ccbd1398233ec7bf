//! Every class of bad input gets the right status, names the field, and commits nothing.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::{assert_status, call, ev, fixture, result};

#[tokio::test]
async fn bad_batches_are_refused_naming_the_field_and_commit_nothing() {
    let srv = server_or_skip!(|c: &mut memex_server::Config| {
        c.limits.max_batch_events = 50;
        c.limits.max_message_bytes = 256 * 1024;
    });
    let mut f = fixture(&srv, "bad").await;
    f.append(vec![call("known")]).await.unwrap();
    let good = || ev("note", "fine");
    let cases: Vec<(Vec<pb::EventInput>, tonic::Code, &str)> = vec![
        (vec![], tonic::Code::InvalidArgument, "events: the batch is empty"),
        (vec![good(), ev("", "x")], tonic::Code::InvalidArgument, "events[1].kind: is empty"),
        (vec![good(), good(), ev("memo", "x")], tonic::Code::InvalidArgument, "events[2].kind: unknown kind \"memo\""),
        (vec![good(), result("never-called", "out")], tonic::Code::InvalidArgument, "events[1].tool_call_id"),
        (vec![result("later", "out"), call("later")], tonic::Code::InvalidArgument, "events[0].tool_call_id"),
        (vec![ev("tool_result", "no id")], tonic::Code::InvalidArgument, "events[0].tool_call_id"),
        (
            vec![pb::EventInput { tool_call_id: "c".into(), ..ev("tool_call", "{}") }],
            tonic::Code::InvalidArgument,
            "events[0].tool_name",
        ),
        (
            vec![pb::EventInput { metadata_json: "[1]".into(), ..good() }],
            tonic::Code::InvalidArgument,
            "events[0].metadata_json",
        ),
        (
            vec![pb::EventInput { event_time: Some(prost_types::Timestamp { seconds: 0, nanos: -5 }), ..good() }],
            tonic::Code::InvalidArgument,
            "events[0].event_time",
        ),
        ((0..51).map(|_| good()).collect(), tonic::Code::InvalidArgument, "over the limit of 50"),
        (vec![ev("note", &"x".repeat(300 * 1024))], tonic::Code::InvalidArgument, "limits.max_message_bytes"),
    ];
    for (events, code, needle) in cases {
        let r = f.append(events).await;
        assert_status(r, code, needle);
    }
    // A result naming a known call from an earlier batch is fine.
    f.append(vec![result("known", "ok")]).await.unwrap();
    assert_eq!(f.event_count().await, 2, "no refused batch committed anything");
}

#[tokio::test]
async fn unknown_namespace_session_and_ids_are_not_found_or_invalid() {
    let srv = server_or_skip!(|c: &mut memex_server::Config| c.auth.enabled = false);
    let mut f = fixture(&srv, "nf").await;
    let mut req = f.append_req(vec![ev("note", "x")], "");
    req.namespace = "no-such-namespace".into();
    assert_status(f.c.events.append_events(req).await, tonic::Code::NotFound, "namespace");
    let mut req = f.append_req(vec![ev("note", "x")], "");
    req.session_id = uuid::Uuid::now_v7().to_string();
    assert_status(f.c.events.append_events(req).await, tonic::Code::NotFound, "session_id");
    let mut req = f.append_req(vec![ev("note", "x")], "");
    req.session_id = "not-a-uuid".into();
    assert_status(f.c.events.append_events(req).await, tonic::Code::InvalidArgument, "session_id");
    let mut req = f.append_req(vec![ev("note", "x")], "");
    req.session_id.clear();
    assert_status(f.c.events.append_events(req).await, tonic::Code::InvalidArgument, "session_id: is required");
    let get = |ids: Vec<String>| pb::GetEventsRequest { namespace: "nf".into(), event_ids: ids, ..Default::default() };
    assert_status(f.c.events.get_events(get(vec!["zzz".into()])).await, tonic::Code::InvalidArgument, "event_ids[0]");
    assert_status(
        f.c.events.get_events(get(vec![uuid::Uuid::now_v7().to_string()])).await,
        tonic::Code::NotFound,
        "event_ids[0]",
    );
    let both = pb::GetEventsRequest {
        namespace: "nf".into(),
        event_ids: vec![uuid::Uuid::now_v7().to_string()],
        session_id: f.session.clone(),
        ..Default::default()
    };
    assert_status(f.c.events.get_events(both).await, tonic::Code::InvalidArgument, "not both");
    let backwards = pb::GetEventsRequest {
        namespace: "nf".into(),
        session_id: f.session.clone(),
        from_seq: 5,
        to_seq: 2,
        ..Default::default()
    };
    assert_status(f.c.events.get_events(backwards).await, tonic::Code::InvalidArgument, "to_seq");
    let bad_token = pb::GetEventsRequest {
        namespace: "nf".into(),
        session_id: f.session.clone(),
        page_token: "garbage".into(),
        ..Default::default()
    };
    assert_status(f.c.events.get_events(bad_token).await, tonic::Code::InvalidArgument, "page_token");
    assert_eq!(f.event_count().await, 0);
}

/// The wire shape of AppendEventsRequest, with `content` as raw bytes so a test can send what a
/// well-behaved client never would: a string field holding invalid UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawEventInput {
    #[prost(string, tag = "1")]
    kind: String,
    #[prost(bytes = "vec", tag = "2")]
    content: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawAppendRequest {
    #[prost(string, tag = "1")]
    namespace: String,
    #[prost(string, tag = "2")]
    session_id: String,
    #[prost(message, repeated, tag = "3")]
    events: Vec<RawEventInput>,
}

#[tokio::test]
async fn invalid_utf8_is_invalid_argument_naming_the_field() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "utf8").await;
    let channel = f.c.channel.clone();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let (_, token) = srv.namespace_with_key("utf8", memex_store::Access::Write).await;
    let mut req = tonic::Request::new(RawAppendRequest {
        namespace: "utf8".into(),
        session_id: f.session.clone(),
        events: vec![
            RawEventInput { kind: "note".into(), content: b"ok".to_vec() },
            RawEventInput { kind: "note".into(), content: vec![0x66, 0x6f, 0xff, 0xfe] },
        ],
    });
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/memex.v1.EventService/AppendEvents");
    let codec: tonic_prost::ProstCodec<RawAppendRequest, pb::AppendEventsResponse> = tonic_prost::ProstCodec::default();
    let r = grpc.unary(req, path, codec).await;
    assert_status(r, tonic::Code::InvalidArgument, "EventInput.content");
    assert_eq!(f.event_count().await, 0);
}
