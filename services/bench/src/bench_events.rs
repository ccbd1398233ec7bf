//! `memex-bench events`: the events a trace file or a SWE-bench trajectory becomes, one JSON line
//! per event with the seq it gets when imported (`memex import` for a trace; the benchmarks' own
//! mapping for a trajectory). The labelled facts under `tests/facts/` cite events by these seqs.
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;

use super::traces::read_trajectories;

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// A trace file (Claude Code, Codex CLI, Gemini CLI or memex events); its events as
    /// `memex import` stores them.
    #[arg(long, conflicts_with = "trajectory")]
    pub trace: Option<PathBuf>,
    /// A SWE-bench trajectory (its 0-based index in the trajectories file) as the benchmarks append it.
    #[arg(long)]
    pub trajectory: Option<usize>,
    /// The agent-traces folder (or its .jsonl.gz file), for --trajectory.
    #[arg(long, default_value = "../shared/bench-data/agent-traces")]
    pub traces: PathBuf,
    /// Longest content printed per event, in characters (0: whole).
    #[arg(long, default_value_t = 0)]
    pub max_content: usize,
}

pub fn run(args: EventsArgs) -> anyhow::Result<()> {
    let events: Vec<serde_json::Value> = match (&args.trace, args.trajectory) {
        (Some(path), _) => {
            let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let (records, diags) = memex_vcc::trace_events(&bytes, memex_vcc::InputFormat::Auto, false)
                .with_context(|| format!("cannot map {}", path.display()))?;
            for d in diags {
                eprintln!("{}", d.render(&path.display().to_string()));
            }
            records
                .into_iter()
                .enumerate()
                .map(|(i, r)| {
                    let r = r.into_append(i as u64, |k| memex_event::EventKind::parse(k).is_ok());
                    json!({"kind": r.kind, "tool_name": r.tool_name, "tool_call_id": r.tool_call_id,
                           "event_time": r.event_time, "content": r.content})
                })
                .collect()
        }
        (None, Some(index)) => {
            let t = read_trajectories(&args.traces, index, 1)?
                .pop()
                .with_context(|| format!("no trajectory {index} in {}", args.traces.display()))?;
            eprintln!("trajectory {index}: {}", t.instance_id);
            t.events
                .into_iter()
                .map(|e| {
                    json!({"kind": e.kind, "tool_name": e.tool_name, "tool_call_id": e.tool_call_id,
                                "content": e.content})
                })
                .collect()
        }
        (None, None) => anyhow::bail!("give --trace FILE or --trajectory N"),
    };
    for (i, mut e) in events.into_iter().enumerate() {
        if let Some(obj) = e.as_object_mut() {
            obj.insert("seq".into(), json!(i + 1));
            if args.max_content > 0
                && let Some(c) = obj.get("content").and_then(|c| c.as_str())
                && c.chars().count() > args.max_content
            {
                let cut: String = c.chars().take(args.max_content).collect();
                obj.insert("content".into(), json!(format!("{cut}…")));
            }
        }
        println!("{e}");
    }
    Ok(())
}
