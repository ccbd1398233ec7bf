//! Reads from a hot standby (`[database] read_url`): settled reads — events, artifacts, stored
//! packs, task-state versions — are served by the standby, and a read that must see the caller's
//! own write is right however far the standby lags (here: replay paused, an unbounded lag).
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_store::SeqRange;
use memex_tests::{TestServer, wait_replayed};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::task_state::state;
use crate::{Fixture, call, ev, fixture, result};

/// Holds the standby to this test (an advisory lock on the primary, which every test process
/// shares) so no other run resumes a replay this one paused.
async fn standby_turn(primary_url: &str) -> PgConnection {
    let mut c = PgConnection::connect(primary_url).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(x'6d656d6578ff'::int8)").execute(&mut c).await.unwrap();
    c
}

/// Standby replay paused for the guard's life, and resumed when it is dropped, even by a failing
/// assertion: a standby left paused would stall every later test.
struct ReplayPaused {
    standby_admin: String,
}

impl ReplayPaused {
    async fn pause(standby_admin: &str) -> ReplayPaused {
        let mut c = PgConnection::connect(standby_admin).await.unwrap();
        sqlx::query("SELECT pg_wal_replay_pause()").execute(&mut c).await.unwrap();
        for _ in 0..500 {
            let s: String =
                sqlx::query_scalar("SELECT pg_get_wal_replay_pause_state()").fetch_one(&mut c).await.unwrap();
            if s == "paused" {
                return ReplayPaused { standby_admin: standby_admin.to_owned() };
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the standby did not pause its replay");
    }
}

impl Drop for ReplayPaused {
    fn drop(&mut self) {
        let url = self.standby_admin.clone();
        let resume = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let mut c = PgConnection::connect(&url).await.unwrap();
                sqlx::query("SELECT pg_wal_replay_resume()").execute(&mut c).await.unwrap();
            });
        });
        let _ = resume.join();
    }
}

/// The last statement of each of the server's standby connections to `db`.
async fn standby_queries(standby_admin: &str, db: &str) -> Vec<String> {
    let mut c = PgConnection::connect(standby_admin).await.unwrap();
    sqlx::query_scalar("SELECT query FROM pg_stat_activity WHERE datname = $1 AND application_name = 'memex-standby'")
        .bind(db)
        .fetch_all(&mut c)
        .await
        .unwrap()
}

/// The standby's `postgres` database as `TEST_STANDBY_URL`'s role (a superuser: pausing replay
/// and reading other roles' queries need one; the server's own role is not).
fn admin_url() -> String {
    let base = std::env::var("TEST_STANDBY_URL").expect("a standby test runs with TEST_STANDBY_URL");
    let mut u = url::Url::parse(&base).unwrap();
    u.set_path("postgres");
    u.to_string()
}

impl Fixture {
    async fn events_by_id(&mut self, ids: &[String]) -> Vec<pb::Event> {
        let req = pb::GetEventsRequest { namespace: self.ns.clone(), event_ids: ids.to_vec(), ..Default::default() };
        self.c.events.get_events(req).await.unwrap().into_inner().events
    }

    async fn stored_pack(&mut self, id: &str) -> pb::Pack {
        let req =
            pb::GetPackRequest { namespace: self.ns.clone(), pack_id: id.into(), view: pb::PackView::Full as i32 };
        self.c.context.get_pack(req).await.unwrap().into_inner()
    }

    async fn task_version(&mut self, task: &str, version: u64) -> pb::TaskStateVersion {
        let req = pb::GetTaskStateRequest { namespace: self.ns.clone(), task_id: task.into(), version };
        self.c.tasks.get_task_state(req).await.unwrap().into_inner()
    }

    async fn hits(&mut self, query: &str) -> Vec<pb::SearchHit> {
        let req =
            pb::SearchRequest { namespace: self.ns.clone(), query: query.into(), limit: 10, ..Default::default() };
        self.c.search.search(req).await.unwrap().into_inner().hits
    }

    async fn build(&mut self, session: &str) -> pb::Pack {
        let req = pb::BuildPackRequest {
            namespace: self.ns.clone(),
            session_id: session.into(),
            user_message: "which flag fixed the cache?".into(),
            view: pb::PackView::Full as i32,
            ..Default::default()
        };
        self.c.context.build_pack(req).await.unwrap().into_inner()
    }
}

#[tokio::test]
async fn settled_reads_come_from_the_standby_and_own_writes_are_read_at_once_despite_lag() {
    let Some(srv) = TestServer::start_standby(|_| {}).await else { return };
    let standby = srv.config.database.read_url.clone();
    let standby_admin = admin_url();
    let db = url::Url::parse(&standby).unwrap().path().trim_start_matches('/').to_owned();
    let _turn = standby_turn(&srv.config.database.url).await;
    let stats = srv.store.standby_stats().expect("the harness store reads from the standby too");

    let mut f = fixture(&srv, "standby").await;
    let s = f.task_session("ship", "exec").await;
    let big = "cache miss on key k1\n".repeat(600); // over 8 KiB: stored as an artifact
    let first = f.append_to(&s, vec![ev("note", "the zebra flag fixed it"), call("c1"), result("c1", &big)], "").await;
    f.put_state("ship", 0, state("ship the cache fix")).await.unwrap();
    let pack = f.build(&s).await;
    let artifact_id = f.events_by_id(&first.event_ids[2..]).await[0].artifact.clone().unwrap().id;
    wait_replayed(&srv.config.database.url, &standby).await;

    // Replayed rows: each read is the standby's (its connection's last statement shows it), and
    // the answer is the one written.
    let got = f.events_by_id(&first.event_ids).await;
    assert_eq!(got[0].content, "the zebra flag fixed it");
    let q = standby_queries(&standby_admin, &db).await;
    assert!(q.iter().any(|q| q.contains("FROM events e") && q.contains("e.id = ANY")), "{q:?}");
    let (_, bytes) = f.artifact(&artifact_id).await.unwrap();
    assert_eq!(bytes, big.as_bytes());
    let q = standby_queries(&standby_admin, &db).await;
    assert!(q.iter().any(|q| q.contains("FROM artifacts")), "{q:?}");
    assert_eq!(f.stored_pack(&pack.pack_id).await, pack);
    let q = standby_queries(&standby_admin, &db).await;
    assert!(q.iter().any(|q| q.contains("FROM context_packs") || q.contains("FROM pack_chunks")), "{q:?}");
    assert_eq!(f.task_version("ship", 1).await.state.unwrap().goals, ["ship the cache fix"]);

    // The store's own account of the same rule, through the harness's store (same options).
    let ns = srv.store.namespace("standby").await.unwrap().id;
    let (session, ids): (Uuid, Vec<Uuid>) =
        (s.parse().unwrap(), first.event_ids.iter().map(|i| i.parse().unwrap()).collect());
    let served = stats.served();
    assert_eq!(srv.store.events_by_ids(ns, &ids).await.unwrap().len(), 3);
    let page = srv.store.events_in_range(ns, session, SeqRange { from: 1, to: Some(3) }, 100, None).await.unwrap();
    assert_eq!(page.events.len(), 3);
    assert_eq!(stats.served(), served + 2, "both reads were the standby's");

    // Replay paused: whatever is written now is on the primary only. The writer's next reads see
    // it all the same: the standby's answer is visibly short, so the primary gives it.
    let paused = ReplayPaused::pause(&standby_admin).await;
    let behind = stats.behind();
    let next = f.append_to(&s, vec![ev("note", "the okapi flag fixed it too")], "").await;
    let fresh = f.events_by_id(&next.event_ids).await;
    assert_eq!(fresh[0].content, "the okapi flag fixed it too");
    let hits = f.hits("okapi").await;
    assert_eq!(hits.len(), 1, "search catches up to the primary's head: {hits:?}");
    let (_, view) = crate::views::view(&f, crate::views::req(&f, &s, pb::ViewKind::Full)).await.unwrap();
    assert!(String::from_utf8_lossy(&view).contains("okapi flag"), "the view sees the new event");
    let v2 = f.put_state("ship", 1, state("ship it, okapi included")).await.unwrap();
    assert_eq!(f.task_version("ship", 0).await, v2, "the current state is the primary's");
    assert_eq!(f.task_version("ship", 2).await, v2);
    let pack2 = f.build(&s).await;
    assert!(pack2.text.contains("okapi"), "the pack sees the new event");
    assert_eq!(f.stored_pack(&pack2.pack_id).await, pack2);
    let newest: Uuid = next.event_ids[0].parse().unwrap();
    assert_eq!(srv.store.events_by_ids(ns, &[newest]).await.unwrap()[0].content, "the okapi flag fixed it too");
    assert!(stats.behind() > behind, "the standby was asked first and found behind");
    drop(paused);

    // Resumed, the standby catches up and serves the new rows too.
    wait_replayed(&srv.config.database.url, &standby).await;
    let served = stats.served();
    assert_eq!(srv.store.events_by_ids(ns, &[newest]).await.unwrap()[0].content, "the okapi flag fixed it too");
    assert_eq!(stats.served(), served + 1);
    assert_eq!(stats.failed(), 0);
}
