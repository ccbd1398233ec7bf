//! The shell around the tailers: find the trace files under the watched directories, read what
//! each gained, append its records, and know where to resume from what the server holds.
//!
//! Polling (every `poll`, 200 ms by default) rather than file-system notifications: it is
//! portable (the same code on Linux, macOS and network file systems), needs no dependency, loses
//! nothing when a notification queue overflows, and has to stat and read the file anyway to
//! tell a growth from a truncation or a rewrite. A poll costs one `stat` per followed file; the
//! directories are walked again every `rescan` to pick up new files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memex_client::{Client, ClientError};
use memex_proto::v1 as pb;
use memex_vcc::{InputFormat, TraceFormat};
use tonic::Code;

use crate::layout::{self, Shape};
use crate::{
    DocumentResume, DocumentTailer, DocumentUpdate, LastMessage, LineResume, LineTailer, Mark, Position, Record,
    Rewritten, batches,
};

/// Bytes read from a file at a time.
const READ_CHUNK: usize = 1 << 20;
const BATCH_EVENTS: usize = 1000;
const BATCH_BYTES: usize = 8 << 20;

/// What to follow and how.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Directories, walked recursively (symbolic links are not followed).
    pub roots: Vec<PathBuf>,
    pub format: InputFormat,
    /// Catch up with every file as it is now, then return.
    pub once: bool,
    pub poll: Duration,
    pub rescan: Duration,
    /// How long a Gemini CLI document must stay unchanged before its last message is taken.
    pub settle: Duration,
    /// The sessions' agent id (default: by format, `claude-code`, `codex`, `gemini-cli`).
    pub agent: Option<String>,
}

/// Where the runner reports; the CLI draws progress and log lines from it.
pub trait Observer: Send {
    /// The first pass is about to read `bytes` in all.
    fn catching_up(&mut self, _bytes: u64) {}
    /// `bytes` of the first pass read so far.
    fn progress(&mut self, _bytes: u64) {}
    /// The first pass is done; from here on, new records are appended as they come.
    fn caught_up(&mut self, _summary: &Summary) {}
    /// Something worth a log line.
    fn note(&mut self, line: &str);
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub files: usize,
    pub events: u64,
    pub sessions: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Server(#[from] ClientError),
}

enum Tail {
    // Boxed: the line tailer carries the blake3 hasher's state (2 KiB).
    Lines(Box<LineTailer>),
    Document { tailer: DocumentTailer, seen: Option<(u64, Option<std::time::SystemTime>)>, quiet: Option<Instant> },
}

/// One followed file.
struct Followed {
    path: PathBuf,
    shape: Shape,
    identity: Option<(u64, u64)>,
    /// The version whose session takes the records (0: none yet), and that session once created.
    version: u32,
    session: Option<String>,
    /// The version before, when the file was rewritten: the new session names it.
    previous: Option<String>,
    /// Whether the session of `version` holds events (a rewrite then starts a new version).
    stored: bool,
    tail: Tail,
    /// Records read but not yet appended (the server was away); appended before anything else.
    pending: Vec<Record>,
    /// Where the next batch starts.
    next: Position,
    /// Whether its malformed lines were reported (once per file and run).
    reported: bool,
}

struct Runner<'a> {
    client: &'a Client,
    opts: &'a WatchOptions,
    obs: &'a mut dyn Observer,
    files: BTreeMap<PathBuf, Followed>,
    summary: Summary,
    read: u64,
    /// Transient failures in the current pass.
    failures: usize,
}

/// Follows the trace files under `opts.roots` until `shutdown` resolves (or, with `opts.once`,
/// until every file is caught up).
pub async fn run(
    client: &Client,
    opts: &WatchOptions,
    obs: &mut dyn Observer,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Summary, WatchError> {
    let mut roots = Vec::new();
    for r in &opts.roots {
        roots.push(std::fs::canonicalize(r).map_err(|source| WatchError::Io { path: r.clone(), source })?);
    }
    let opts = &WatchOptions { roots, ..opts.clone() };
    let mut runner =
        Runner { client, opts, obs, files: BTreeMap::new(), summary: Summary::default(), read: 0, failures: 0 };
    tokio::pin!(shutdown);
    let found = runner.scan()?;
    let total: u64 = found.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    runner.obs.catching_up(total);
    runner.pass(found, true).await?;
    runner.summary.files = runner.files.len();
    runner.obs.caught_up(&runner.summary);
    if opts.once {
        return Ok(runner.summary);
    }
    let mut scanned = Instant::now();
    // While the server is away, look less often (up to every 10 s) and log less.
    let mut delay = opts.poll;
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(runner.summary),
            _ = tokio::time::sleep(delay) => {}
        }
        let found = if scanned.elapsed() >= opts.rescan {
            scanned = Instant::now();
            runner.scan()?
        } else {
            runner.files.keys().cloned().collect()
        };
        runner.failures = 0;
        runner.pass(found, false).await?;
        runner.summary.files = runner.files.len();
        delay = if runner.failures > 0 { (delay * 2).min(Duration::from_secs(10)) } else { opts.poll };
    }
}

/// Catches one trace file up, as `memex watch --once` would (the same sessions, marks and
/// exactly-once appends), and returns its session's id: `None` when the file is not a trace
/// `format` reads or holds no record yet. Hooks call it before they ask for a snapshot.
pub async fn catch_up_file(
    client: &Client,
    path: &Path,
    format: InputFormat,
    agent: Option<String>,
    obs: &mut dyn Observer,
) -> Result<Option<String>, WatchError> {
    let path = std::fs::canonicalize(path).map_err(|source| WatchError::Io { path: path.to_owned(), source })?;
    let opts = WatchOptions {
        roots: Vec::new(),
        format,
        once: true,
        poll: Duration::ZERO,
        rescan: Duration::ZERO,
        settle: Duration::ZERO,
        agent,
    };
    let mut runner =
        Runner { client, opts: &opts, obs, files: BTreeMap::new(), summary: Summary::default(), read: 0, failures: 0 };
    runner.pass(vec![path.clone()], true).await?;
    Ok(runner.files.get(&path).filter(|f| f.stored).and_then(|f| f.session.clone()))
}

impl Runner<'_> {
    /// The trace files under the roots, parents before their sub-agents.
    fn scan(&self) -> Result<Vec<PathBuf>, WatchError> {
        let mut out = Vec::new();
        let mut dirs: Vec<PathBuf> = self.opts.roots.clone();
        while let Some(dir) = dirs.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(source) if self.opts.roots.contains(&dir) => return Err(WatchError::Io { path: dir, source }),
                Err(_) => continue, // vanished or unreadable below a root: not ours to fail on
            };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else { continue };
                let path = entry.path();
                if kind.is_dir() {
                    dirs.push(path);
                } else if kind.is_file() && layout::shape(&path, self.opts.format).is_some() {
                    out.push(path);
                }
            }
        }
        layout::parents_first(&mut out);
        Ok(out)
    }

    async fn pass(&mut self, paths: Vec<PathBuf>, first: bool) -> Result<(), WatchError> {
        for path in paths {
            if !self.files.contains_key(&path) {
                let Some(shape) = layout::shape(&path, self.opts.format) else { continue };
                match self.open(&path, shape).await {
                    Ok(f) => {
                        self.files.insert(path.clone(), f);
                    }
                    Err(e) => {
                        self.transient(&path, e)?;
                        continue;
                    }
                }
            }
            let Some(mut f) = self.files.remove(&path) else { continue };
            let kept = self.follow(&mut f, first).await;
            match kept {
                Ok(true) => {
                    self.files.insert(path, f);
                }
                Ok(false) => {} // gone
                Err(e) => {
                    self.files.insert(path.clone(), f);
                    self.transient(&path, e)?;
                }
            }
        }
        Ok(())
    }

    /// A failure that waits for the next poll (the server away or busy), or ends the watch (the
    /// key cannot write here).
    fn transient(&mut self, path: &Path, e: ClientError) -> Result<(), WatchError> {
        match e.code() {
            Code::PermissionDenied | Code::Unauthenticated => Err(e.into()),
            _ if self.opts.once => Err(e.into()),
            _ => {
                self.failures += 1;
                self.obs.note(&format!("{}: {e}; retrying", path.display()));
                Ok(())
            }
        }
    }

    /// Starts following `path`: the newest version the server holds, and where its events end.
    async fn open(&mut self, path: &Path, shape: Shape) -> Result<Followed, ClientError> {
        let ns = self.client.namespace().to_owned();
        let (mut version, mut current) = (0, None);
        loop {
            match self.client.get_session(&layout::session_id(&ns, path, version + 1)).await {
                Ok(s) => (version, current) = (version + 1, Some(s)),
                Err(e) if e.code() == Code::NotFound => break,
                Err(e) => return Err(e),
            }
        }
        let mut f = Followed {
            path: path.to_owned(),
            shape,
            identity: identity(path),
            version: version.max(1),
            session: None,
            previous: None,
            stored: false,
            tail: new_tail(shape, self.opts.format, None),
            pending: Vec::new(),
            next: start(shape),
            reported: false,
        };
        let Some(session) = current else { return Ok(f) };
        f.session = Some(session.id.clone());
        if session.event_count == 0 {
            return Ok(f);
        }
        f.stored = true;
        let last = self
            .client
            .get_events(pb::GetEventsRequest {
                session_id: session.id.clone(),
                from_seq: session.event_count,
                to_seq: session.event_count,
                ..Default::default()
            })
            .await?;
        let mark = last.events.first().and_then(|e| Mark::from_metadata(&e.metadata_json));
        match (shape, mark) {
            (Shape::Lines, Some(Mark::Line { end, prefix, .. })) => {
                f.tail = Tail::Lines(Box::new(LineTailer::new(self.opts.format, Some(LineResume { end, prefix }))));
                f.next = Position::Byte(end);
            }
            (Shape::Document, Some(Mark::Message { index, prefix })) => {
                let resume = DocumentResume { next: index + 1, prefix };
                f.tail = new_tail(shape, self.opts.format, Some(resume));
                f.next = Position::Message(index + 1);
            }
            _ => {
                let why = "its session's last event was not written by memex watch";
                self.new_version(&mut f, why);
            }
        }
        Ok(f)
    }

    /// Sends the rest of `f` to a new version (a new session linked to the current one).
    fn new_version(&mut self, f: &mut Followed, why: &str) {
        if f.stored {
            f.previous = f.session.take();
            f.version += 1;
            f.stored = false;
            self.obs.note(&format!("{}: {why}; reading it again as version {}", f.path.display(), f.version));
        }
        f.tail = new_tail(f.shape, self.opts.format, None);
        f.pending.clear();
        f.next = start(f.shape);
    }

    /// Reads what `f` gained and appends it. `Ok(false)`: the file is gone.
    async fn follow(&mut self, f: &mut Followed, first: bool) -> Result<bool, ClientError> {
        self.flush(f).await?;
        if !f.path.exists() {
            return Ok(false);
        }
        let now = identity(&f.path);
        if now != f.identity {
            // Replaced (written elsewhere and renamed over it): start again from what the
            // server holds; the tail says whether it is the same trace.
            *f = self.open(&f.path.clone(), f.shape).await?;
        }
        let mut reopened = false;
        let records = loop {
            match self.read(f, first) {
                Ok(r) => break r,
                // A check of the live tail failed: hold the file against what the server holds
                // before calling it a rewrite (an unfinished line may simply have been redone).
                Err(_) if f.stored && !reopened => {
                    *f = self.open(&f.path.clone(), f.shape).await?;
                    reopened = true;
                }
                Err(why) => {
                    self.new_version(f, &why.to_string());
                    break self.read(f, first).unwrap_or_default();
                }
            }
        };
        f.pending.extend(records);
        if let Tail::Lines(t) = &mut f.tail {
            let diags = t.take_diagnostics();
            if let Some(d) = diags.first().filter(|_| !f.reported) {
                f.reported = true;
                let more = if diags.len() > 1 { format!(" (and {} more)", diags.len() - 1) } else { String::new() };
                self.obs.note(&format!("{}{more}", d.render(&f.path.display().to_string())));
            }
        }
        self.flush(f).await?;
        Ok(true)
    }

    fn read(&mut self, f: &mut Followed, first: bool) -> Result<Vec<Record>, Rewritten> {
        let Ok(meta) = std::fs::metadata(&f.path) else { return Ok(Vec::new()) };
        if matches!(f.tail, Tail::Lines(_)) {
            self.read_lines(f, meta.len(), first)
        } else {
            self.read_document(f, &meta, first)
        }
    }

    /// Reads a JSON-lines file from where its tail stands to `len`.
    fn read_lines(&mut self, f: &mut Followed, len: u64, first: bool) -> Result<Vec<Record>, Rewritten> {
        let Tail::Lines(t) = &mut f.tail else { return Ok(Vec::new()) };
        if len < t.read_pos() {
            return Err(Rewritten::Shrank { len, stored: t.read_pos() });
        }
        // A finished trace (most of them, after a restart) is not read again until it grows:
        // replaying it from byte 0 is only needed to map what comes next.
        if t.read_pos() == 0 && t.resume().is_some_and(|r| r.end == len) {
            if first {
                self.read += len;
                self.obs.progress(self.read);
            }
            return Ok(Vec::new());
        }
        if let Some(last) = t.last_line()
            && len > t.read_pos()
            && read_range(&f.path, last.offset, last.end)
                .is_some_and(|b| <[u8; 32]>::from(blake3::hash(&b)) != last.hash)
        {
            return Err(Rewritten::Changed { at: last.end });
        }
        let mut out = Vec::new();
        let Ok(mut file) = std::fs::File::open(&f.path) else { return Ok(out) };
        let mut pos = t.read_pos();
        let mut buf = vec![0u8; READ_CHUNK];
        while pos < len {
            let want = usize::try_from(len - pos).unwrap_or(READ_CHUNK).min(READ_CHUNK);
            let n = match read_at(&mut file, pos, &mut buf[..want]) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            pos += n as u64;
            if first {
                self.read += n as u64;
                self.obs.progress(self.read);
            }
            out.extend(t.push(&buf[..n])?);
        }
        if let Some(r) = t.resume() {
            return Err(Rewritten::Shrank { len: pos, stored: r.end });
        }
        if t.format() == TraceFormat::Gemini && !f.reported {
            f.reported = true;
            self.obs
                .note(&format!("{}: a JSON document, not JSON lines; name it .json to follow it", f.path.display()));
        }
        Ok(out)
    }

    /// Reads a Gemini CLI document again when it changed, or when it has been quiet for
    /// `settle` (then its last message may be taken).
    fn read_document(
        &mut self,
        f: &mut Followed,
        meta: &std::fs::Metadata,
        first: bool,
    ) -> Result<Vec<Record>, Rewritten> {
        let Tail::Document { tailer, seen, quiet } = &mut f.tail else { return Ok(Vec::new()) };
        let stamp = Some((meta.len(), meta.modified().ok()));
        let last = if self.opts.once {
            LastMessage::Take
        } else if *seen != stamp {
            *seen = stamp;
            *quiet = Some(Instant::now() + self.opts.settle);
            LastMessage::Hold
        } else if quiet.is_some_and(|at| Instant::now() >= at) {
            *quiet = None;
            LastMessage::IfSettled
        } else {
            return Ok(Vec::new());
        };
        let Ok(bytes) = std::fs::read(&f.path) else { return Ok(Vec::new()) };
        if first {
            self.read += bytes.len() as u64;
            self.obs.progress(self.read);
        }
        match tailer.update(&bytes, last)? {
            DocumentUpdate::Records(r) => Ok(r),
            DocumentUpdate::Unreadable(d) => {
                if self.opts.once {
                    self.obs.note(&d.render(&f.path.display().to_string()));
                }
                Ok(Vec::new())
            }
        }
    }

    /// Appends `f`'s pending records, batch by batch; what could not be sent stays pending.
    async fn flush(&mut self, f: &mut Followed) -> Result<(), ClientError> {
        if f.pending.is_empty() {
            return Ok(());
        }
        let session = match &f.session {
            Some(s) => s.clone(),
            None => self.create_session(f).await?,
        };
        let mut done = 0;
        let mut result = Ok(());
        for (from, batch) in batches(&f.pending, f.next, BATCH_EVENTS, BATCH_BYTES) {
            match self.append(&session, from, batch).await {
                Ok(n) => {
                    done += batch.len();
                    f.next = batch[batch.len() - 1].mark.next();
                    f.stored = true;
                    self.summary.events += n;
                    self.obs.note(&format!("{}: +{n} events → session {session}", f.path.display()));
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        f.pending.drain(..done);
        if let Err(e) = &result
            && matches!(e.code(), Code::AlreadyExists | Code::NotFound | Code::FailedPrecondition)
        {
            // Someone else wrote this session (another watcher?): start again from what it holds.
            self.obs.note(&format!("{}: {e}; reading what the server holds", f.path.display()));
            *f = self.open(&f.path.clone(), f.shape).await?;
            return Ok(());
        }
        result
    }

    /// Appends one batch; a batch the server refuses as invalid is sent record by record, and a
    /// record it refuses alone is stored as one `x-watch.refused` event saying why, so that the
    /// resume point moves past it and nothing is dropped silently.
    async fn append(&mut self, session: &str, from: Position, batch: &[Record]) -> Result<u64, ClientError> {
        let events: Vec<pb::EventInput> = batch.iter().flat_map(|r| r.events.iter().cloned()).collect();
        let n = events.len() as u64;
        match self.client.append_events(session, events, Some(from.key(session))).await {
            Ok(_) => return Ok(n),
            Err(e) if e.code() != Code::InvalidArgument => return Err(e),
            Err(e) if batch.len() == 1 => {
                let refused = refusal(&batch[0], &e);
                self.obs.note(&format!("session {session}: a record was refused ({e}); stored as x-watch.refused"));
                self.client.append_events(session, vec![refused], Some(from.key(session))).await?;
                return Ok(1);
            }
            Err(_) => {}
        }
        let mut total = 0;
        let mut at = from;
        for r in batch {
            total += Box::pin(self.append(session, at, std::slice::from_ref(r))).await?;
            at = r.mark.next();
        }
        Ok(total)
    }

    /// Creates the session of `f`'s current version, linked to its parent's and previous version.
    async fn create_session(&mut self, f: &mut Followed) -> Result<String, ClientError> {
        let format = match &f.tail {
            Tail::Lines(t) => t.format(),
            Tail::Document { .. } => TraceFormat::Gemini,
        };
        let hint = f.pending.first().and_then(|r| r.events.first()).and_then(|e| {
            let m: serde_json::Value = serde_json::from_str(&e.metadata_json).ok()?;
            m.get("sessionId")?.as_str().map(str::to_owned)
        });
        let parent_file = layout::parent_trace(&f.path, hint.as_deref());
        let parent = parent_file.as_ref().and_then(|p| self.files.get(p)).and_then(|p| p.session.clone());
        let id = layout::session_id(self.client.namespace(), &f.path, f.version);
        let agent = self.opts.agent.clone().unwrap_or_else(|| layout::default_agent(format).to_owned());
        let req = pb::CreateSessionRequest {
            agent_id: agent,
            parent_session_id: parent.unwrap_or_default(),
            source_format: format.name().to_owned(),
            metadata_json: layout::session_metadata(&f.path, f.version, f.previous.as_deref(), parent_file.as_deref()),
            session_id: id.clone(),
            ..Default::default()
        };
        match self.client.create_session(req).await {
            Ok(_) => {}
            // Created by another watcher with other attributes (another --agent): it is still
            // this file's session.
            Err(e) if e.code() == Code::AlreadyExists => {
                self.client.get_session(&id).await?;
            }
            Err(e) => return Err(e),
        }
        self.summary.sessions += 1;
        let previous = f.previous.as_deref().map(|p| format!(" (after {p})")).unwrap_or_default();
        self.obs.note(&format!("{}: session {id}, version {}{previous}", f.path.display(), f.version));
        f.session = Some(id.clone());
        Ok(id)
    }
}

fn refusal(r: &Record, e: &ClientError) -> pb::EventInput {
    let mut metadata = serde_json::Map::new();
    metadata.insert(crate::MARK_KEY.into(), r.mark.to_json());
    metadata.insert("refused_events".into(), r.events.len().into());
    pb::EventInput {
        kind: "x-watch.refused".into(),
        content: e.to_string(),
        metadata_json: serde_json::Value::Object(metadata).to_string(),
        ..Default::default()
    }
}

fn new_tail(shape: Shape, format: InputFormat, resume: Option<DocumentResume>) -> Tail {
    match shape {
        Shape::Lines => Tail::Lines(Box::new(LineTailer::new(format, None))),
        Shape::Document => Tail::Document { tailer: DocumentTailer::new(format, resume), seen: None, quiet: None },
    }
}

fn start(shape: Shape) -> Position {
    match shape {
        Shape::Lines => Position::Byte(0),
        Shape::Document => Position::Message(0),
    }
}

#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(_path: &Path) -> Option<(u64, u64)> {
    None
}

fn read_at(file: &mut std::fs::File, pos: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(pos))?;
    file.read(buf)
}

fn read_range(path: &Path, from: u64, to: u64) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut buf = vec![0u8; usize::try_from(to.checked_sub(from)?).ok()?];
    file.read_exact(&mut buf).ok()?;
    Some(buf)
}
