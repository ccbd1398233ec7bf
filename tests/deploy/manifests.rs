//! Rendered manifests as typed Kubernetes objects, and the checks that they make a working memex.
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The image's paths (scripts/build-image-rootfs.sh; services/memex/tests/image.rs checks them).
const MODEL_DIR: &str = "/opt/memex/models/all-MiniLM-L6-v2";

#[derive(Default)]
pub struct Manifests {
    pub deployments: Vec<Deployment>,
    pub services: Vec<Service>,
    pub jobs: Vec<Job>,
    pub config_maps: Vec<ConfigMap>,
    pub secrets: Vec<Secret>,
    pub hpas: Vec<HorizontalPodAutoscaler>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub service_monitors: Vec<ServiceMonitor>,
}

/// The fields of a Prometheus Operator ServiceMonitor the chart uses (a CRD: not in
/// k8s-openapi); any other field fails.
#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceMonitor {
    pub api_version: String,
    pub kind: String,
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub spec: ServiceMonitorSpec,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceMonitorSpec {
    pub selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    pub endpoints: Vec<ServiceMonitorEndpoint>,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceMonitorEndpoint {
    pub port: String,
    pub path: String,
    pub interval: String,
}

/// Parses `T` from `doc` and serializes it back: a field `T` does not have is dropped on the way,
/// and the first path where the two differ names it.
fn typed<T: DeserializeOwned + Serialize>(doc: &Value, what: &str) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&t).unwrap();
    if let Some(path) = first_difference(doc, &back, String::new()) {
        panic!("{what}: `{path}` is not a field of {} (or does not survive it)", std::any::type_name::<T>());
    }
    t
}

fn first_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x
            .iter()
            .find_map(|(k, v)| match y.get(k) {
                Some(w) => first_difference(v, w, format!("{path}.{k}")),
                None => Some(format!("{path}.{k}")),
            })
            .or_else(|| y.keys().find(|k| !x.contains_key(*k)).map(|k| format!("{path}.{k} (added)"))),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (v, w))| first_difference(v, w, format!("{path}[{i}]")))
        }
        _ => (a != b).then_some(path),
    }
}

fn labels_match(selector: &BTreeMap<String, String>, labels: Option<&BTreeMap<String, String>>) -> bool {
    let labels = labels.cloned().unwrap_or_default();
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl Manifests {
    pub fn parse(yaml: &str) -> Manifests {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("rendered YAML");
        let mut m = Manifests::default();
        for doc in docs.iter().filter(|d| !d.is_null()) {
            let api = doc["apiVersion"].as_str().unwrap_or_default();
            let kind = doc["kind"].as_str().unwrap_or_default();
            let what = format!("{kind}/{}", doc["metadata"]["name"].as_str().unwrap_or("?"));
            match (api, kind) {
                ("apps/v1", "Deployment") => m.deployments.push(typed(doc, &what)),
                ("v1", "Service") => m.services.push(typed(doc, &what)),
                ("batch/v1", "Job") => m.jobs.push(typed(doc, &what)),
                ("v1", "ConfigMap") => m.config_maps.push(typed(doc, &what)),
                ("v1", "Secret") => m.secrets.push(typed(doc, &what)),
                ("autoscaling/v2", "HorizontalPodAutoscaler") => m.hpas.push(typed(doc, &what)),
                ("policy/v1", "PodDisruptionBudget") => m.pdbs.push(typed(doc, &what)),
                ("monitoring.coreos.com/v1", "ServiceMonitor") => m.service_monitors.push(typed(doc, &what)),
                _ => panic!("{what}: unexpected {api} {kind}"),
            }
        }
        m
    }

    pub fn kinds(&self) -> Vec<String> {
        let name = |kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            format!("{kind}/{}", meta.name.as_deref().unwrap_or_default())
        };
        let mut all: Vec<String> = self.deployments.iter().map(|o| name("Deployment", &o.metadata)).collect();
        all.extend(self.services.iter().map(|o| name("Service", &o.metadata)));
        all.extend(self.jobs.iter().map(|o| name("Job", &o.metadata)));
        all.extend(self.config_maps.iter().map(|o| name("ConfigMap", &o.metadata)));
        all.extend(self.secrets.iter().map(|o| name("Secret", &o.metadata)));
        all.extend(self.hpas.iter().map(|o| name("HorizontalPodAutoscaler", &o.metadata)));
        all.extend(self.pdbs.iter().map(|o| name("PodDisruptionBudget", &o.metadata)));
        all.extend(self.service_monitors.iter().map(|o| name("ServiceMonitor", &o.metadata)));
        all.sort();
        all
    }

    pub fn deployment(&self, name: &str) -> &Deployment {
        let found = self.deployments.iter().find(|d| d.metadata.name.as_deref() == Some(name));
        found.unwrap_or_else(|| panic!("no Deployment {name}"))
    }

    pub fn service(&self, name: &str) -> &Service {
        let found = self.services.iter().find(|d| d.metadata.name.as_deref() == Some(name));
        found.unwrap_or_else(|| panic!("no Service {name}"))
    }

    pub fn secret(&self, name: &str) -> &Secret {
        let found = self.secrets.iter().find(|d| d.metadata.name.as_deref() == Some(name));
        found.unwrap_or_else(|| panic!("no Secret {name}"))
    }

    fn config_map(&self, name: &str) -> &ConfigMap {
        let found = self.config_maps.iter().find(|d| d.metadata.name.as_deref() == Some(name));
        found.unwrap_or_else(|| panic!("no ConfigMap {name}"))
    }

    /// The optional OpenTelemetry Collector: memex's pods export OTLP to it, and the
    /// ServiceMonitor scrapes its Prometheus port.
    pub fn check_collector(&self, release: &str) {
        let name = format!("{release}-otel-collector");
        let svc = self.service(&name);
        let spec = svc.spec.as_ref().unwrap();
        let pod = self.deployment(&name).spec.as_ref().unwrap().template.metadata.as_ref().unwrap();
        assert!(labels_match(spec.selector.as_ref().unwrap(), pod.labels.as_ref()), "{name}: selector");
        let port_names: Vec<_> = spec.ports.iter().flatten().filter_map(|p| p.name.clone()).collect();
        assert!(port_names.contains(&"prometheus".to_owned()) && port_names.contains(&"otlp-grpc".to_owned()));
        let config = self.config_map(&name).data.as_ref().unwrap()["collector.yaml"].clone();
        assert!(config.contains("endpoint: 0.0.0.0:4317") && config.contains("endpoint: 0.0.0.0:8889"), "{config}");
        let [sm] = &self.service_monitors[..] else { panic!("one ServiceMonitor") };
        let selector = sm.spec.selector.match_labels.as_ref().unwrap();
        assert!(labels_match(selector, svc.metadata.labels.as_ref()), "the ServiceMonitor selects the collector");
        assert!(sm.spec.endpoints.iter().all(|e| port_names.contains(&e.port)));
        for role in ["api", "worker"] {
            let env = env_of(container(self.deployment(&format!("{release}-{role}"))));
            assert_eq!(
                env.get("OTEL_EXPORTER_OTLP_ENDPOINT").map(String::as_str),
                Some(&*format!("http://{name}:4317"))
            );
        }
    }
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn container(d: &Deployment) -> &Container {
    &pod_spec(d).containers[0]
}

/// A container's environment: literal values, and `secret:NAME/KEY` for secret references.
fn env_of(c: &Container) -> BTreeMap<String, String> {
    c.env
        .iter()
        .flatten()
        .map(|e| {
            let value = match (&e.value, &e.value_from) {
                (Some(v), _) => v.clone(),
                (None, Some(from)) => {
                    let s = from.secret_key_ref.as_ref().expect("env from a Secret");
                    format!("secret:{}/{}", s.name, s.key)
                }
                (None, None) => String::new(),
            };
            (e.name.clone(), value)
        })
        .collect()
}

/// The configuration memex would load in `c`: the ConfigMap's memex.toml, the container's
/// `MEMEX_*` variables (unknown keys fail, as memex refuses them), and its `--role`.
fn memex_config(m: &Manifests, c: &Container, pod: &PodSpec) -> memex_server::Config {
    let env = env_of(c);
    let mount = c.volume_mounts.iter().flatten().find(|v| v.mount_path == "/etc/memex").expect("/etc/memex mounted");
    assert_eq!(env.get("MEMEX_CONFIG").map(String::as_str), Some("/etc/memex/memex.toml"));
    let volume = pod.volumes.iter().flatten().find(|v| v.name == mount.name).unwrap();
    let cm = m.config_map(&volume.config_map.as_ref().expect("a ConfigMap volume").name);
    let toml = &cm.data.as_ref().unwrap()["memex.toml"];
    let file = std::env::temp_dir().join(format!("memex-deploy-{}-{}.toml", std::process::id(), c.name));
    std::fs::write(&file, toml).unwrap();
    let mut overrides = serde_json::Map::new();
    for (name, value) in &env {
        let Some(key) = name.strip_prefix("MEMEX_").filter(|k| *k != "CONFIG") else { continue };
        let value = match value.strip_prefix("secret:") {
            Some(_) if key == "DATABASE__URL" => Value::from("postgres://memex:secret@postgres:5432/memex"),
            Some(_) => Value::from("a-secret"),
            None => serde_json::from_str(value).unwrap_or_else(|_| Value::from(value.as_str())),
        };
        let path: Vec<String> = key.split("__").map(str::to_lowercase).collect();
        let (last, sections) = path.split_last().unwrap();
        let mut at = &mut overrides;
        for s in sections {
            at = at.entry(s.clone()).or_insert_with(|| Value::Object(Default::default())).as_object_mut().unwrap();
        }
        at.insert(last.clone(), value);
    }
    let args = c.args.clone().unwrap_or_default();
    if let Some(i) = args.iter().position(|a| a == "--role") {
        overrides.insert("role".into(), Value::from(args[i + 1].clone()));
    }
    let config = memex_server::Config::load(Some(&file), Value::Object(overrides))
        .unwrap_or_else(|e| panic!("{}: memex would not start: {e}", c.name));
    let _ = std::fs::remove_file(&file);
    config
}

/// What makes the objects a working memex deployment.
pub fn check_memex(m: &Manifests, release: &str) {
    for (role, want_args) in [("api", ["serve", "--role", "api"]), ("worker", ["serve", "--role", "worker"])] {
        let d = m.deployment(&format!("{release}-{role}"));
        let (pod, c) = (pod_spec(d), container(d));
        let args = c.args.clone().unwrap_or_default();
        assert_eq!(args[..3], want_args, "{role}: args");
        let config = memex_config(m, c, pod);
        assert_eq!(format!("{:?}", config.role).to_lowercase(), role);
        assert!(!config.database.migrate_on_start, "{role}: replicas leave migrating to the Job");
        assert!(config.listen.ip().is_unspecified() && config.listen.port() == 50051, "{role}: {}", config.listen);
        assert_eq!(config.embedding.model_dir, MODEL_DIR);

        // Probes: alive as soon as it serves; ready only when memex says so (overall health).
        let grpc = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            let g = p.as_ref().and_then(|p| p.grpc.as_ref()).unwrap_or_else(|| panic!("{role}: a gRPC probe"));
            (g.port, g.service.clone().unwrap_or_default())
        };
        assert_eq!(grpc(&c.liveness_probe), (50051, memex_server::LIVENESS.to_owned()), "{role}: liveness");
        assert_eq!(grpc(&c.startup_probe), (50051, memex_server::LIVENESS.to_owned()), "{role}: startup");
        assert_eq!(grpc(&c.readiness_probe), (50051, String::new()), "{role}: readiness is the overall health");
        let ports: Vec<_> =
            c.ports.iter().flatten().map(|p| (p.name.clone().unwrap_or_default(), p.container_port)).collect();
        assert!(ports.contains(&("grpc".into(), 50051)), "{role}: {ports:?}");

        // Termination: preStop, then shutdown_grace_secs of drain and the clean-up, within the grace.
        let pre_stop = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).and_then(|h| h.sleep.as_ref());
        let pre_stop = pre_stop.unwrap_or_else(|| panic!("{role}: a preStop sleep")).seconds;
        let needed = pre_stop + config.shutdown_grace_secs as i64 + memex_server::CLEANUP.as_secs() as i64;
        let grace = pod.termination_grace_period_seconds.unwrap_or(30);
        assert!(grace >= needed, "{role}: terminationGracePeriodSeconds {grace} < {needed}");

        // Runs as the image's non-root user on a read-only root; the index on a writable volume.
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!((sc.read_only_root_filesystem, sc.allow_privilege_escalation), (Some(true), Some(false)));
        let psc = pod.security_context.as_ref().unwrap();
        assert_eq!((psc.run_as_non_root, psc.run_as_user), (Some(true), Some(10001)));
        let writable: Vec<_> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|v| v.read_only != Some(true))
            .map(|v| v.mount_path.clone())
            .collect();
        assert!(
            writable.iter().any(|p| config.search.index_dir.starts_with(&format!("{p}/"))),
            "{role}: index_dir {} is on none of {writable:?}",
            config.search.index_dir
        );
        let requests = c.resources.as_ref().and_then(|r| r.requests.clone()).unwrap_or_default();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"), "{role}: resource requests");

        // Every secret it reads exists, with the key.
        for value in env_of(c).values() {
            let Some((name, key)) = value.strip_prefix("secret:").and_then(|s| s.split_once('/')) else { continue };
            let optional = key == "embedding-api-key";
            let has = m.secret(name).string_data.as_ref().is_some_and(|d| d.contains_key(key));
            assert!(has || optional, "{role}: Secret {name} has no {key}");
        }
    }

    // The API Services select the API pods, on the named gRPC port; one is headless.
    let api = m.deployment(&format!("{release}-api"));
    let api_labels = api.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels.as_ref();
    for (name, headless) in [(release.to_owned(), false), (format!("{release}-headless"), true)] {
        let spec = m.service(&name).spec.clone().unwrap();
        assert!(labels_match(spec.selector.as_ref().unwrap(), api_labels), "{name} selects the API pods");
        assert_eq!(spec.cluster_ip.as_deref() == Some("None"), headless, "{name}");
        let grpc = spec.ports.iter().flatten().find(|p| p.name.as_deref() == Some("grpc")).expect("a grpc port");
        assert_eq!(
            grpc.target_port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("grpc".into()))
        );
    }
    let worker = m.deployment(&format!("{release}-worker"));
    let worker_labels = worker.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels.as_ref();
    for s in &m.services {
        let selector = s.spec.as_ref().and_then(|s| s.selector.as_ref()).unwrap();
        assert!(!labels_match(selector, worker_labels), "no Service sends RPCs to the workers");
    }

    // The migration Job runs `memex migrate` with the same configuration.
    let [job] = &m.jobs[..] else { panic!("one migration Job") };
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.args.as_deref(), Some(&["migrate".to_owned()][..]));
    assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
    memex_config(m, c, pod);

    // Autoscaling and disruptions act on the API Deployment.
    let [hpa] = &m.hpas[..] else { panic!("one HorizontalPodAutoscaler") };
    let target = &hpa.spec.as_ref().unwrap().scale_target_ref;
    assert_eq!((target.kind.as_str(), target.name.as_str()), ("Deployment", &*format!("{release}-api")));
    assert!(api.spec.as_ref().unwrap().replicas.is_none(), "the HPA owns the API replica count");
    let [pdb] = &m.pdbs[..] else { panic!("one PodDisruptionBudget") };
    let selector = pdb.spec.as_ref().unwrap().selector.as_ref().unwrap().match_labels.as_ref().unwrap();
    assert!(labels_match(selector, api_labels), "the PDB covers the API pods");
}
