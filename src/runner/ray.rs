//! The Ray backend: each attempt is a job on a Ray cluster, submitted over the Ray
//! Jobs REST API. The script's folder and jax-runner's wrapper travel as
//! content-addressed packages; the wrapper runs the script and sends back, through the
//! job's log, what a local attempt records (see `ray/returned.rs`), so timeouts,
//! retries, fallback and every report behave as for local runs.

use crate::error::RayError;
use crate::model::{JaxTelemetry, RayJob};
use crate::plan::Cluster;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::attempt::{AttemptOutcome, StoppedBy};
use super::Stop;

mod outcome;
mod package;
pub use outcome::lost_line_of;
mod returned;
#[cfg(test)]
mod wrapper_tests;

/// How often a job's status is polled.
const POLL: Duration = Duration::from_millis(500);

/// A client of one cluster.
#[derive(Debug, Clone)]
pub struct RayClient {
    address: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl RayClient {
    pub fn new(address: &str, token: Option<String>) -> RayClient {
        RayClient {
            address: address.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("an HTTP client builds"),
            token,
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.address));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn send(
        &self,
        what: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, RayError> {
        let resp = req.send().await.map_err(|e| RayError::Unreachable {
            address: self.address.clone(),
            message: e.to_string(),
        })?;
        Ok(resp).and_then(|r| {
            let status = r.status();
            if status.is_success() || status.as_u16() == 404 {
                Ok(r)
            } else {
                Err(RayError::Refused {
                    address: self.address.clone(),
                    what: what.into(),
                    status: status.as_u16(),
                    body: String::new(),
                })
            }
        })
    }

    async fn json(&self, what: &str, req: reqwest::RequestBuilder) -> Result<Value, RayError> {
        let resp = self.send(what, req).await?;
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        if status == 404 {
            return Err(RayError::Refused {
                address: self.address.clone(),
                what: what.into(),
                status,
                body,
            });
        }
        Ok(serde_json::from_str(&body).unwrap_or(Value::String(body)))
    }

    /// Checks the cluster before submitting anything: its version and resources. A GPU
    /// run on a cluster without GPUs is refused here, not left PENDING.
    pub async fn check(&self, want_gpu: bool) -> Result<Cluster, RayError> {
        let version = self
            .json(
                "GET /api/version",
                self.request(reqwest::Method::GET, "/api/version"),
            )
            .await?;
        let nodes = self
            .json(
                "GET /api/v0/nodes",
                self.request(reqwest::Method::GET, "/api/v0/nodes?detail=1"),
            )
            .await?;
        let mut gpus = 0.0;
        let mut cpus = 0.0;
        for node in nodes["data"]["result"]["result"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if node["state"].as_str().is_some_and(|s| s != "ALIVE") {
                continue;
            }
            gpus += node["resources_total"]["GPU"].as_f64().unwrap_or(0.0);
            cpus += node["resources_total"]["CPU"].as_f64().unwrap_or(0.0);
        }
        if want_gpu && gpus == 0.0 {
            return Err(RayError::NoGpu {
                address: self.address.clone(),
            });
        }
        Ok(Cluster {
            what: format!(
                "Ray cluster (Ray {})",
                version["ray_version"].as_str().unwrap_or("?")
            ),
            gpus,
            cpus,
        })
    }

    /// Uploads `bytes` as a package named by its content, unless the cluster has it.
    pub async fn upload(&self, bytes: Vec<u8>) -> Result<String, RayError> {
        let hash: String = Sha256::digest(&bytes)[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name = format!("_ray_pkg_{hash}.zip");
        let path = format!("/api/packages/gcs/{name}");
        let present = self
            .send("GET package", self.request(reqwest::Method::GET, &path))
            .await?;
        if present.status().as_u16() == 404 {
            let put = self
                .request(reqwest::Method::PUT, &path)
                .header("Content-Type", "application/octet-stream")
                .body(bytes);
            self.send("PUT package", put).await?;
        }
        Ok(format!("gcs://{name}"))
    }

    pub async fn submit(&self, body: &Value) -> Result<String, RayError> {
        let v = self
            .json(
                "POST /api/jobs/",
                self.request(reqwest::Method::POST, "/api/jobs/").json(body),
            )
            .await?;
        Ok(v["submission_id"]
            .as_str()
            .or(v["job_id"].as_str())
            .unwrap_or_default()
            .to_string())
    }

    pub async fn status(&self, id: &str) -> Result<Value, RayError> {
        self.json(
            "GET job",
            self.request(reqwest::Method::GET, &format!("/api/jobs/{id}")),
        )
        .await
    }

    pub async fn logs(&self, id: &str) -> Result<String, RayError> {
        let v = self
            .json(
                "GET logs",
                self.request(reqwest::Method::GET, &format!("/api/jobs/{id}/logs")),
            )
            .await?;
        Ok(v["logs"].as_str().unwrap_or_default().to_string())
    }

    pub async fn stop(&self, id: &str) {
        let _ = self
            .send(
                "POST stop",
                self.request(reqwest::Method::POST, &format!("/api/jobs/{id}/stop")),
            )
            .await;
    }

    pub fn address(&self) -> &str {
        &self.address
    }
}

/// What one job needs.
pub struct JobSpec<'a> {
    pub script: &'a Path,
    pub env: Vec<(String, String)>,
    pub gpu: bool,
    pub submission_id: String,
    pub stdout_log: &'a Path,
    pub stderr_log: &'a Path,
    pub timeout: Duration,
    /// The script's local data folder (`GNN_OUTPUT_DIR`).
    pub data_dir: &'a Path,
    /// `--ray-max-return`: the largest data folder copied back, bytes.
    pub max_return: u64,
    /// The tasks the script's tree may hold (`--max-procs`, or the default), which
    /// the wrapper's watchdog holds it to.
    pub max_procs: u64,
    /// `--memory-limit`, bytes, held the same way.
    pub memory_limit: Option<u64>,
}

/// What an attempt on the cluster brings back.
pub struct JobOutcome {
    pub outcome: AttemptOutcome,
    pub job: RayJob,
    /// The telemetry shim's report, when the wrapper sent it.
    pub jax: Option<JaxTelemetry>,
}

/// Runs one attempt as a job and reports it as a local attempt would be reported.
pub async fn run_attempt(
    client: &RayClient,
    spec: &JobSpec<'_>,
    stop: tokio::sync::watch::Receiver<Stop>,
) -> Result<JobOutcome, RayError> {
    let dir = spec.script.parent().unwrap_or(Path::new("."));
    let uri = client.upload(package::package(dir)?).await?;
    let wrapper = client.upload(package::wrapper_package()).await?;
    let file = spec
        .script
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce = nonce(&spec.submission_id);
    let mut env: serde_json::Map<String, Value> = spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    env.insert("JAX_RUNNER_RAY_SCRIPT".into(), json!(file));
    env.insert("JAX_RUNNER_RAY_NONCE".into(), json!(nonce));
    env.insert(
        "JAX_RUNNER_RAY_MAX_RETURN".into(),
        json!(spec.max_return.to_string()),
    );
    env.insert(
        "JAX_RUNNER_RAY_MAX_PROCS".into(),
        json!(spec.max_procs.to_string()),
    );
    if let Some(bytes) = spec.memory_limit {
        env.insert(
            "JAX_RUNNER_RAY_MEMORY_LIMIT".into(),
            json!(bytes.to_string()),
        );
    }
    let body = json!({
        "entrypoint": format!("python -m {}", package::WRAPPER_MODULE),
        "submission_id": spec.submission_id,
        "runtime_env": {"working_dir": uri, "py_modules": [wrapper], "env_vars": env},
        "entrypoint_num_cpus": 1,
        "entrypoint_num_gpus": if spec.gpu { 1 } else { 0 },
        "metadata": {"submitted_by": "jax-runner", "script": spec.script.to_string_lossy()},
    });
    // Seen from the job, this marker says the data folder is shared: nothing to copy.
    let marker = spec.data_dir.join(format!(".jax-runner-ray-{nonce}"));
    // Made anew in the data folder: a link or FIFO left at its name is replaced.
    let _ = crate::confined::create_file(&marker);
    let started_at = SystemTime::now();
    let started = Instant::now();
    let polled = poll(client, &body, spec.timeout, stop).await;
    let _ = std::fs::remove_file(&marker);
    let (id, status, stopped_by) = polled?;
    let logs = client.logs(&id).await.unwrap_or_default();
    let mut job = RayJob {
        address: client.address().to_string(),
        job_id: id,
        node_id: status["driver_node_id"].as_str().map(str::to_string),
        status: status["status"].as_str().unwrap_or("").to_string(),
        // On failure Ray's message ends with the log's tail: the return block is not news.
        message: status["message"]
            .as_str()
            .map(|m| returned::without_block(m, &nonce).to_string()),
        error_type: status["error_type"].as_str().map(str::to_string),
        ..Default::default()
    };
    let mut outcome = outcome::from_status(&status, started_at, started.elapsed(), stopped_by);
    // A log Ray could not fetch from the job's node leaves its message, which holds the
    // log's last 20,000 characters: a small return block fits in it.
    let message = status["message"].as_str().unwrap_or_default();
    let found = returned::find(&logs, &nonce).or_else(|| returned::find(message, &nonce));
    let jax = match found {
        Some(r) => outcome::reported(r, spec, &mut outcome, &mut job),
        None => {
            outcome::whole_log(&logs, &nonce, spec, &mut outcome);
            outcome::lost(&job, &mut outcome);
            None
        }
    };
    Ok(JobOutcome { outcome, job, jax })
}

/// Submits the job and polls it to its end, stopping it on timeout or `stop`.
async fn poll(
    client: &RayClient,
    body: &Value,
    timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<Stop>,
) -> Result<(String, Value, Option<StoppedBy>), RayError> {
    let started = Instant::now();
    let id = client.submit(body).await?;
    let mut stopped_by = None;
    loop {
        let s = client.status(&id).await?;
        let state = s["status"].as_str().unwrap_or("").to_string();
        if matches!(state.as_str(), "SUCCEEDED" | "FAILED" | "STOPPED") {
            return Ok((id, s, stopped_by));
        }
        if stopped_by.is_none() && started.elapsed() > timeout {
            stopped_by = Some(StoppedBy::Timeout);
            client.stop(&id).await;
        }
        // The guard wait_for returns must not live across the stop request's await.
        let interrupted = tokio::select! {
            _ = tokio::time::sleep(POLL) => false,
            r = stop.wait_for(|s| *s != Stop::Run), if stopped_by.is_none() => r.is_ok(),
        };
        if interrupted {
            stopped_by = Some(StoppedBy::Interrupt);
            client.stop(&id).await;
        }
    }
}

/// A token framing this job's return block: unknown to other jobs' output.
fn nonce(submission_id: &str) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seed = format!("{submission_id}:{}:{}", std::process::id(), now.as_nanos());
    Sha256::digest(seed.as_bytes())[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
