//! The Ray backend: each attempt is a job on a Ray cluster, submitted over the Ray
//! Jobs REST API. The script's folder travels as a content-addressed package; the
//! attempt's result is built from the job's status and logs, so timeouts, retries,
//! fallback and every report behave as for local runs.

use crate::error::RayError;
use crate::model::RayJob;
use crate::plan::Cluster;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::attempt::{AttemptOutcome, Start, StoppedBy};
use super::output::Drained;
use super::sys::Exit;
use super::Stop;

/// How often a job's status is polled.
const POLL: Duration = Duration::from_millis(500);
/// Largest script folder sent to the cluster.
const MAX_PACKAGE: u64 = 100 * 1024 * 1024;

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
            ray_version: version["ray_version"].as_str().unwrap_or("?").to_string(),
            gpus,
            cpus,
        })
    }

    /// Uploads `dir` as a package named by its content, unless the cluster has it.
    pub async fn upload(&self, dir: &Path) -> Result<String, RayError> {
        let bytes = package(dir)?;
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

/// Zips `dir` with its files at the archive's root (Ray's `working_dir` layout).
fn package(dir: &Path) -> Result<Vec<u8>, RayError> {
    let fail = |message: String| RayError::Package {
        path: dir.to_path_buf(),
        message,
    };
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .map_err(|e| fail(e.to_string()))?
            .flatten()
        {
            let p = e.path();
            let name = e.file_name();
            if name == "__pycache__" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => files.push(p),
                _ => {}
            }
        }
    }
    files.sort();
    let mut total = 0u64;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    // Fixed timestamps: the same folder always makes the same package name.
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .last_modified_time(zip::DateTime::default());
    for f in files {
        let rel = f
            .strip_prefix(dir)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(&f).map_err(|e| fail(format!("{}: {e}", f.display())))?;
        total += bytes.len() as u64;
        if total > MAX_PACKAGE {
            return Err(fail(format!(
                "the folder is over {} MiB",
                MAX_PACKAGE >> 20
            )));
        }
        zip.start_file(rel, opts).map_err(|e| fail(e.to_string()))?;
        zip.write_all(&bytes).map_err(|e| fail(e.to_string()))?;
    }
    Ok(zip.finish().map_err(|e| fail(e.to_string()))?.into_inner())
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
}

/// Runs one attempt as a job and reports it as a local attempt would be reported.
pub async fn run_attempt(
    client: &RayClient,
    spec: &JobSpec<'_>,
    mut stop: tokio::sync::watch::Receiver<Stop>,
) -> Result<(AttemptOutcome, RayJob), RayError> {
    let dir = spec.script.parent().unwrap_or(Path::new("."));
    let uri = client.upload(dir).await?;
    let file = spec
        .script
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let env: serde_json::Map<String, Value> = spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let body = json!({
        "entrypoint": format!("python {}", shell_word(&file)),
        "submission_id": spec.submission_id,
        "runtime_env": {"working_dir": uri, "env_vars": env},
        "entrypoint_num_cpus": 1,
        "entrypoint_num_gpus": if spec.gpu { 1 } else { 0 },
        "metadata": {"submitted_by": "jax-runner", "script": spec.script.to_string_lossy()},
    });
    let started_at = SystemTime::now();
    let started = Instant::now();
    let id = client.submit(&body).await?;
    let mut stopped_by = None;
    let status = loop {
        let s = client.status(&id).await?;
        let state = s["status"].as_str().unwrap_or("").to_string();
        if matches!(state.as_str(), "SUCCEEDED" | "FAILED" | "STOPPED") {
            break s;
        }
        if stopped_by.is_none() && started.elapsed() > spec.timeout {
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
    };
    let logs = client.logs(&id).await.unwrap_or_default();
    let _ = std::fs::write(spec.stdout_log, &logs);
    let _ = std::fs::write(spec.stderr_log, b"");
    let mut stdout = Drained {
        bytes: logs.len() as u64,
        ..Default::default()
    };
    // The job's log holds stdout and stderr together: classify from all of it.
    for line in logs.lines() {
        stdout.scan.line(line.as_bytes());
    }
    stdout.tail = super::output::last_lines(logs.as_bytes(), 40);
    let code =
        status["driver_exit_code"]
            .as_i64()
            .map(|c| c as i32)
            .or(match status["status"].as_str() {
                Some("SUCCEEDED") => Some(0),
                _ => Some(1),
            });
    let stderr = Drained {
        tail: stdout.tail.clone(),
        scan: stdout.scan.clone(),
        ..Default::default()
    };
    let job = RayJob {
        address: client.address().to_string(),
        job_id: id,
        node_id: status["driver_node_id"].as_str().map(str::to_string),
        status: status["status"].as_str().unwrap_or("").to_string(),
        message: status["message"].as_str().map(str::to_string),
        error_type: status["error_type"].as_str().map(str::to_string),
    };
    Ok((
        AttemptOutcome {
            started_at,
            duration: started.elapsed(),
            exit: Exit {
                code,
                signal: None,
                user_cpu: Duration::ZERO,
                system_cpu: Duration::ZERO,
                max_rss_bytes: 0,
            },
            stopped_by,
            peak_rss_bytes: 0,
            stdout,
            stderr,
            leaks: Vec::new(),
            kernel_oom_kill: false,
            refused_forks: 0,
            sampled_cpu: (0.0, 0.0),
            gpu_device_opened: None,
            capabilities: None,
            gpu: None,
            start: Start::Cold,
        },
        job,
    ))
}

/// Quotes a file name for the entrypoint's shell.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_put_files_at_the_root_and_are_reproducible() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("model.py"), "print(1)\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("data")).unwrap();
        std::fs::write(tmp.path().join("data/a.json"), "{}").unwrap();
        std::fs::create_dir_all(tmp.path().join("__pycache__")).unwrap();
        std::fs::write(tmp.path().join("__pycache__/x.pyc"), "x").unwrap();
        let a = package(tmp.path()).unwrap();
        assert_eq!(
            a,
            package(tmp.path()).unwrap(),
            "same folder, same bytes, same name"
        );
        let mut z = zip::ZipArchive::new(std::io::Cursor::new(a)).unwrap();
        let mut names: Vec<String> = (0..z.len())
            .map(|i| z.by_index(i).unwrap().name().to_string())
            .collect();
        names.sort();
        assert_eq!(names, vec!["data/a.json", "model.py"]);
    }

    #[test]
    fn entrypoint_words_are_quoted_when_needed() {
        assert_eq!(shell_word("model.py"), "model.py");
        assert_eq!(shell_word("my model.py"), "'my model.py'");
    }
}
