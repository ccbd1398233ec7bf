//! `memex-bench view`: import a trace, then time CompileView (cold, then served from the cache)
//! and ReadLines through gRPC. Prints figures, then one JSON line.
use std::time::{Duration, Instant};

use memex_proto::v1 as pb;
use memex_proto::v1::view_service_client::ViewServiceClient;
use serde_json::json;

use super::bench::{ViewBenchArgs, round, start_server};

pub async fn run(args: ViewBenchArgs) -> anyhow::Result<()> {
    let raw = std::fs::read(&args.trace)?;
    let (conn, _server) = start_server(&args.config).await?;
    let channel = conn.channel().await?;
    let mut views = ViewServiceClient::new(channel.clone()).max_decoding_message_size(usize::MAX);
    let file_name = args.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let t0 = Instant::now();
    let mut msgs = vec![pb::ImportTraceRequest {
        namespace: conn.namespace.clone(),
        agent_id: "bench".into(),
        file_name,
        ..Default::default()
    }];
    msgs.extend(raw.chunks(1 << 20).map(|c| pb::ImportTraceRequest { chunk: c.to_vec(), ..Default::default() }));
    let imported = views.import_trace(tokio_stream::iter(msgs)).await?.into_inner();
    let import_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let session = imported.session.map(|s| s.id).unwrap_or_default();
    let request = pb::CompileViewRequest {
        namespace: conn.namespace.clone(),
        session_id: session.clone(),
        view: pb::ViewKind::Full as i32,
        chain: 1,
        ..Default::default()
    };
    let fetch = |mut v: ViewServiceClient<tonic::transport::Channel>, r: pb::CompileViewRequest| async move {
        let mut stream = v.compile_view(r).await?.into_inner();
        let mut bytes = 0usize;
        while let Some(c) = stream.message().await? {
            bytes += c.text.len();
        }
        anyhow::Ok(bytes)
    };
    // The import seeded the cache; a second server-side key (another chain option) is not needed:
    // measure every request as served, the first included.
    let t1 = Instant::now();
    let view_bytes = fetch(views.clone(), request.clone()).await?;
    let first_ms = t1.elapsed().as_secs_f64() * 1000.0;

    let until = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for i in 0..args.clients {
        let v = views.clone();
        let (req, ns, session) = (request.clone(), conn.namespace.clone(), session.clone());
        tasks.push(tokio::spawn(async move {
            let mut compile = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut read = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut n = 0u32;
            while Instant::now() < until {
                let t = Instant::now();
                if (n as usize + i).is_multiple_of(2) {
                    fetch(v.clone(), req.clone()).await?;
                    compile.record(t.elapsed().as_micros().max(1) as u64)?;
                } else {
                    let first = 1 + (n * 37) % 200;
                    v.clone()
                        .read_lines(pb::ReadLinesRequest {
                            namespace: ns.clone(),
                            session_id: session.clone(),
                            first_line: first,
                            last_line: first + 20,
                            ..Default::default()
                        })
                        .await?;
                    read.record(t.elapsed().as_micros().max(1) as u64)?;
                }
                n += 1;
            }
            anyhow::Ok((compile, read))
        }));
    }
    let mut compile = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut read = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for t in tasks {
        let (c, r) = t.await??;
        compile.add(c)?;
        read.add(r)?;
    }
    let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "import: {} bytes, {} events, {} chains in {import_ms:.1} ms; full view {view_bytes} bytes",
        raw.len(),
        imported.events,
        imported.chains
    );
    println!(
        "CompileView (cached full view): {} requests, p50 {:.3} ms, p99 {:.3} ms; first request {first_ms:.2} ms",
        compile.len(),
        ms(&compile, 0.5),
        ms(&compile, 0.99)
    );
    println!(
        "ReadLines (21 lines): {} requests, p50 {:.3} ms, p99 {:.3} ms",
        read.len(),
        ms(&read, 0.5),
        ms(&read, 0.99)
    );
    let summary = json!({
        "bench": "view", "trace_bytes": raw.len(), "events": imported.events, "import_ms": round(import_ms),
        "view_bytes": view_bytes, "clients": args.clients,
        "compile_view": {"requests": compile.len(), "p50_ms": round(ms(&compile, 0.5)), "p99_ms": round(ms(&compile, 0.99))},
        "read_lines": {"requests": read.len(), "p50_ms": round(ms(&read, 0.5)), "p99_ms": round(ms(&read, 0.99))},
    });
    println!("{summary}");
    Ok(())
}
