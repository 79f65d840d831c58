//! The manifests under `deploy/`, checked as a cluster would take them: every object
//! file and each kustomization's output against the Kubernetes API's schemas (the PyPI
//! package kubernetes-validate, strict: unknown fields fail), and the PostgreSQL
//! variant's rollout against the server's own drain settings.
//!
//! Needs `bash scripts/setup-test-tools.sh` (.tools/k8s-venv) and kustomize (`kustomize`,
//! or the one built into `kubectl`); skipped without them, except under CI=true.
//!
//! sqlite-only: checks the manifests; no store.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::child::{Run, run_with_input};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The kustomizations under deploy/.
const KUSTOMIZATIONS: [&str; 2] = ["deploy/kubernetes", "deploy/kubernetes-replicas"];

/// Seconds the server gives streams other than memory calls past `shutdown_grace`
/// (a health Watch, the change feed): see deploy/README.md, "Health and lifecycle".
const OTHER_STREAMS_GRACE: f64 = 5.0;

struct Tools {
    validate: PathBuf,
    python: PathBuf,
    /// `kustomize build` or `kubectl kustomize`.
    kustomize: Vec<String>,
}

fn tools() -> Option<Tools> {
    let venv = std::env::var_os("MEMMACHINE_TEST_K8S_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools/k8s-venv"));
    let validate = venv.join("bin/kubernetes-validate");
    let kustomize = [
        vec!["kustomize".to_owned(), "build".to_owned()],
        vec!["kubectl".to_owned(), "kustomize".to_owned()],
    ]
    .into_iter()
    .find(|command| {
        Command::new(&command[0])
            .arg("version")
            .args(if command[0] == "kubectl" {
                &["--client"][..]
            } else {
                &[]
            })
            .try_run()
            .is_ok_and(|out| out.status.success())
    });
    let missing = if !validate.exists() {
        format!(
            "{} is missing (run bash scripts/setup-test-tools.sh)",
            validate.display()
        )
    } else if kustomize.is_none() {
        "neither kustomize nor kubectl (for `kubectl kustomize`) is on the PATH".to_owned()
    } else {
        return Some(Tools {
            validate,
            python: venv.join("bin/python"),
            kustomize: kustomize.unwrap(),
        });
    };
    crate::common::cannot_run("the Kubernetes manifests' check", &missing);
    None
}

/// `kustomize build dir`: the objects as YAML.
fn render(tools: &Tools, dir: &str) -> String {
    let out = Command::new(&tools.kustomize[0])
        .args(&tools.kustomize[1..])
        .arg(repo_root().join(dir))
        .run();
    assert!(
        out.status.success(),
        "{} {dir} failed:\n{}",
        tools.kustomize.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// YAML documents as JSON values (PyYAML, from the validator's venv).
fn parse_yaml(tools: &Tools, yaml: &str) -> Vec<Value> {
    let out = run_with_input(
        Command::new(&tools.python).args([
            "-c",
            "import sys, json, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
        ]),
        yaml.as_bytes().to_vec(),
    );
    assert!(
        out.status.success(),
        "PyYAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs kubernetes-validate --strict on `files`; the failures it printed, if any.
fn validate(tools: &Tools, files: &[PathBuf]) -> Result<String, String> {
    let out = Command::new(&tools.validate)
        .args(["--strict", "--no-warn"])
        .args(files)
        .run();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(printed)
    } else {
        Err(printed)
    }
}

/// The object files a kustomization lists as resources (patches are partial objects:
/// they are validated in the rendered output).
fn resource_files(dir: &Path, kustomization: &Value) -> Vec<PathBuf> {
    kustomization["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| dir.join(r.as_str().unwrap()))
        .filter(|p| p.is_file())
        .collect()
}

#[test]
fn every_manifest_and_kustomization_validates() {
    let Some(tools) = tools() else { return };
    let rendered_dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for dir in KUSTOMIZATIONS {
        let path = repo_root().join(dir);
        let kustomization = std::fs::read_to_string(path.join("kustomization.yaml")).unwrap();
        let kustomization = parse_yaml(&tools, &kustomization).remove(0);
        files.extend(resource_files(&path, &kustomization));
        let rendered = rendered_dir
            .path()
            .join(format!("{}.yaml", dir.replace('/', "_")));
        std::fs::write(&rendered, render(&tools, dir)).unwrap();
        files.push(rendered);
    }
    // Every YAML file under deploy/ is an object, a kustomization or a patch of one.
    assert!(
        files.len() > KUSTOMIZATIONS.len(),
        "no object files found: {files:?}"
    );
    match validate(&tools, &files) {
        Ok(printed) => {
            let passed = printed.matches(" passed for resource ").count();
            assert!(
                passed >= files.len(),
                "too few objects validated:\n{printed}"
            );
        }
        Err(printed) => panic!("the manifests do not validate:\n{printed}"),
    }
}

/// kubernetes-validate is not a no-op: a field the API does not have fails.
#[test]
fn the_validator_refuses_an_unknown_field() {
    let Some(tools) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    let deployment = std::fs::read_to_string(repo_root().join("deploy/kubernetes/deployment.yaml"))
        .unwrap()
        .replace(
            "readOnlyRootFilesystem: true",
            "readOnlyRootFileSystem: true",
        );
    std::fs::write(&file, deployment).unwrap();
    let printed = validate(&tools, &[file]).expect_err("a misspelt field must fail");
    assert!(printed.contains("readOnlyRootFileSystem"), "{printed}");
}

/// The PostgreSQL variant rolls one new pod in before an old one goes, keeps a
/// PodDisruptionBudget, spreads its pods, and lets each pod drain fully before the
/// kubelet's SIGKILL; the single-pod variant's grace period holds its drain too.
#[test]
fn the_replicas_roll_without_losing_capacity() {
    let Some(tools) = tools() else { return };
    let defaults = serve_defaults();
    let objects = parse_yaml(&tools, &render(&tools, "deploy/kubernetes-replicas"));
    let deployment = only(&objects, "Deployment");
    let spec = &deployment["spec"];
    let replicas = spec["replicas"].as_u64().expect("replicas");
    assert!(
        replicas >= 2,
        "the replicas variant runs {replicas} replica(s)"
    );
    let strategy = &spec["strategy"];
    assert_eq!(strategy["type"], "RollingUpdate", "{strategy}");
    assert_eq!(strategy["rollingUpdate"]["maxUnavailable"], 0, "{strategy}");
    assert_eq!(strategy["rollingUpdate"]["maxSurge"], 1, "{strategy}");
    assert!(
        objects.iter().all(|o| o["kind"] != "PersistentVolumeClaim"),
        "the replicas keep no volume"
    );

    let pod_labels = &spec["template"]["metadata"]["labels"];
    let matches = |selector: &Value| {
        let wanted = selector["matchLabels"].as_object().expect("matchLabels");
        !wanted.is_empty() && wanted.iter().all(|(k, v)| &pod_labels[k] == v)
    };
    let pdb = only(&objects, "PodDisruptionBudget");
    assert!(
        matches(&pdb["spec"]["selector"]),
        "the PDB selects other pods: {pdb}"
    );
    let allowed_down = match (&pdb["spec"]["maxUnavailable"], &pdb["spec"]["minAvailable"]) {
        (Value::Number(n), _) => n.as_u64().unwrap(),
        (_, Value::Number(n)) => replicas - n.as_u64().unwrap(),
        other => {
            panic!("the PDB sets neither maxUnavailable nor minAvailable as a number: {other:?}")
        }
    };
    assert!(
        (1..replicas).contains(&allowed_down),
        "the PDB lets {allowed_down} of {replicas} pods go at once"
    );

    let pod = &spec["template"]["spec"];
    let spread = pod["topologySpreadConstraints"]
        .as_array()
        .expect("topologySpreadConstraints");
    let keys: Vec<&str> = spread
        .iter()
        .inspect(|c| assert!(matches(&c["labelSelector"]), "{c} selects other pods"))
        .map(|c| c["topologyKey"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"kubernetes.io/hostname"),
        "no spread over nodes: {keys:?}"
    );

    let container = &pod["containers"][0];
    for probe in ["readinessProbe", "startupProbe"] {
        let probe = &container[probe];
        let health = probe["grpc"]["port"] == 50051 || probe["httpGet"]["path"] == "/api/v2/health";
        assert!(health, "{probe} is not the health service");
    }
    assert!(
        container["lifecycle"]["preStop"].is_object(),
        "no preStop hook: the pod would get SIGTERM while endpoints still send to it"
    );
    check_drain_fits("deploy/kubernetes-replicas", &objects, &defaults);

    let single = parse_yaml(&tools, &render(&tools, "deploy/kubernetes"));
    check_drain_fits("deploy/kubernetes", &single, &defaults);
}

fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected, found {}", found.len());
    found[0]
}

/// `memmachine serve --help`'s defaults for --drain-delay and --shutdown-grace.
fn serve_defaults() -> (f64, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["serve", "--help"])
        .run();
    let help = String::from_utf8_lossy(&out.stdout);
    let default_of = |flag: &str| -> f64 {
        let at = help
            .find(&format!("--{flag} <"))
            .unwrap_or_else(|| panic!("serve --help has no --{flag}"));
        let rest = &help[at..];
        let value = rest.split("[default: ").nth(1).expect("a default");
        value[..value.find(']').unwrap()].parse().unwrap()
    };
    (default_of("drain-delay"), default_of("shutdown-grace"))
}

/// preStop + drain_delay + shutdown_grace + the other streams' 5 s stay below
/// terminationGracePeriodSeconds, each setting read where the pod gets it: a flag in
/// `args`, else a MEMMACHINE_* variable in `env`, else the config file, else the default.
fn check_drain_fits(dir: &str, objects: &[Value], defaults: &(f64, f64)) {
    let pod = &only(objects, "Deployment")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let config: toml::Table = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .and_then(|c| c["data"]["memmachine.toml"].as_str())
        .map(|text| toml::from_str(text).expect("memmachine.toml parses"))
        .unwrap_or_default();
    let args: Vec<&str> = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let setting = |flag: &str, var: &str, key: &str, default: f64| -> f64 {
        let from_args = args
            .iter()
            .position(|a| *a == format!("--{flag}"))
            .map(|i| args[i + 1].to_owned())
            .or_else(|| {
                args.iter()
                    .find_map(|a| a.strip_prefix(&format!("--{flag}=")).map(str::to_owned))
            });
        let from_env = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == var)
            .and_then(|e| e["value"].as_str().map(str::to_owned));
        let from_file = config.get(key).map(|v| match v {
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            other => panic!("{key} = {other} in memmachine.toml"),
        });
        from_args
            .or(from_env)
            .or(from_file)
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{flag} = {v}")))
            .unwrap_or(default)
    };
    let drain = setting(
        "drain-delay",
        "MEMMACHINE_DRAIN_DELAY",
        "drain_delay",
        defaults.0,
    );
    let grace = setting(
        "shutdown-grace",
        "MEMMACHINE_SHUTDOWN_GRACE",
        "shutdown_grace",
        defaults.1,
    );
    let pre_stop = &container["lifecycle"]["preStop"];
    let sleep = match (&pre_stop["sleep"]["seconds"], &pre_stop["exec"]["command"]) {
        (Value::Number(n), _) => n.as_f64().unwrap(),
        (_, Value::Array(command)) => {
            assert!(
                command.len() == 2 && command[0] == "sleep",
                "{dir}: a preStop this test cannot time: {command:?}"
            );
            command[1].as_str().unwrap().parse().unwrap()
        }
        _ if pre_stop.is_null() => 0.0,
        _ => panic!("{dir}: a preStop this test cannot time: {pre_stop}"),
    };
    let period = pod["terminationGracePeriodSeconds"]
        .as_f64()
        .unwrap_or(30.0);
    let needed = sleep + drain + grace + OTHER_STREAMS_GRACE;
    assert!(
        needed < period,
        "{dir}: preStop {sleep} s + drain_delay {drain} s + shutdown_grace {grace} s + \
         {OTHER_STREAMS_GRACE} s = {needed} s does not fit in terminationGracePeriodSeconds {period}"
    );
    assert!(
        drain > 0.0 || sleep > 0.0,
        "{dir}: neither a preStop sleep nor a drain_delay: SIGTERM refuses calls at once"
    );
}
