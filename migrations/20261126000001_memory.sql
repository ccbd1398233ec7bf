-- Memory (Virtual Context): turns, segments, facts and topics derived from the events by the
-- memory worker (memex-recall). Like the search tables, everything here is derived and can be
-- deleted and rebuilt from `events` (`memex memory rebuild`); nothing is ever the only copy.

-- How far the worker has read each session. `fact_seq`: events up to it went through the fact
-- extractor, whose state after it is `state`; `turn_seq`: the last seq of the last closed turn;
-- `open_seq`: the first seq of the session's open segment (0: none yet). A lease lets replicas
-- share the work, as for embeddings.
CREATE TABLE memory_progress (
    namespace_id  uuid NOT NULL,
    session_id    uuid NOT NULL,
    fact_seq      bigint NOT NULL DEFAULT 0,
    turn_seq      bigint NOT NULL DEFAULT 0,
    open_seq      bigint NOT NULL DEFAULT 0,
    state         jsonb,
    leased_until  timestamptz,
    leased_by     text,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, session_id)
);

-- Closed turns and how the interpreter read them (tags; an LLM's fact signals).
CREATE TABLE memory_turns (
    session_id    uuid NOT NULL,
    first_seq     bigint NOT NULL,
    namespace_id  uuid NOT NULL,
    last_seq      bigint NOT NULL,
    start_time    timestamptz NOT NULL,
    end_time      timestamptz NOT NULL,
    tags          text[] NOT NULL,
    signals       jsonb,
    PRIMARY KEY (namespace_id, session_id, first_seq)
);

-- Segments: contiguous same-topic turns of one session, with their extractive summary (lines
-- with seqs). The open (last) segment of a session is rewritten as its turns arrive.
CREATE TABLE memory_segments (
    namespace_id   uuid NOT NULL,
    id             uuid NOT NULL,
    session_id     uuid NOT NULL,
    first_seq      bigint NOT NULL,
    last_seq       bigint NOT NULL,
    start_time     timestamptz NOT NULL,
    end_time       timestamptz NOT NULL,
    turns          integer NOT NULL,
    tokens         integer NOT NULL,
    tags           text[] NOT NULL,
    primary_tag    text,
    group_seq      bigint NOT NULL,
    keywords       text[] NOT NULL,
    vector         real[],
    summary        jsonb NOT NULL,
    summary_text   text NOT NULL,
    summary_tokens integer NOT NULL,
    closed         boolean NOT NULL,
    -- Facts read from its events (kept by the worker; topics sum them).
    facts          integer NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace_id, id),
    UNIQUE (namespace_id, session_id, first_seq)
);
CREATE INDEX memory_segments_tags ON memory_segments USING gin (tags);
CREATE INDEX memory_segments_time ON memory_segments (namespace_id, start_time);

-- Facts, with their supersession link. `subject_key` is the subject as chains compare it.
CREATE TABLE memory_facts (
    namespace_id   uuid NOT NULL,
    id             uuid NOT NULL,
    session_id     uuid NOT NULL,
    first_seq      bigint NOT NULL,
    last_seq       bigint NOT NULL,
    fact_type      text NOT NULL,
    subject        text NOT NULL,
    subject_key    text NOT NULL,
    verb           text NOT NULL,
    object         text NOT NULL,
    what           text NOT NULL,
    who            text NOT NULL,
    when_time      timestamptz NOT NULL,
    place          text NOT NULL,
    why            text NOT NULL,
    status         text NOT NULL,
    keywords       text[] NOT NULL,
    source         text NOT NULL,
    superseded_by  uuid,
    superseded_at  timestamptz,
    PRIMARY KEY (namespace_id, id)
);
CREATE INDEX memory_facts_subject ON memory_facts (namespace_id, fact_type, subject_key);
CREATE INDEX memory_facts_time ON memory_facts (namespace_id, when_time);
CREATE INDEX memory_facts_session ON memory_facts (namespace_id, session_id, first_seq);
CREATE INDEX memory_facts_keywords ON memory_facts USING gin (keywords);

-- Topics: canonical tags (with their aliases), subtopics of over-broad tags, the set cover, and
-- each topic's summary. Rebuilt per namespace after new segments (`memory_namespaces.dirty`).
CREATE TABLE memory_topics (
    namespace_id   uuid NOT NULL,
    tag            text NOT NULL,
    aliases        text[] NOT NULL,
    parent         text,
    with_tags      text[] NOT NULL,
    segments       integer NOT NULL,
    turns          integer NOT NULL,
    sessions       integer NOT NULL,
    first_time     timestamptz,
    last_time      timestamptz,
    broad          boolean NOT NULL,
    in_cover       boolean NOT NULL,
    summary        jsonb NOT NULL,
    summary_tokens integer NOT NULL,
    description    text NOT NULL,
    facts          integer NOT NULL,
    members_hash   bytea NOT NULL,
    PRIMARY KEY (namespace_id, tag)
);

-- Per namespace: `version` counts writes of segments, `built_version` is the version the topics
-- were last rebuilt from (behind: a rebuild is due), and a lease on doing it.
CREATE TABLE memory_namespaces (
    namespace_id   uuid PRIMARY KEY,
    version        bigint NOT NULL DEFAULT 0,
    built_version  bigint NOT NULL DEFAULT -1,
    rebuilt_at     timestamptz,
    -- How long the last rebuild took: the next waits at least four times as long.
    rebuild_ms     integer NOT NULL DEFAULT 0,
    leased_until   timestamptz,
    leased_by      text
);

-- A reader agent's paging state: its working set (VC §3.6) and the segments it was shown
-- (FindQuote's presented_refs).
CREATE TABLE memory_readers (
    namespace_id  uuid NOT NULL,
    reader        text NOT NULL,
    working_set   jsonb NOT NULL,
    presented     uuid[] NOT NULL DEFAULT '{}',
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, reader)
);
