//! The three agents: an orchestrator coordinating a `sandbox-runner` (four sandbox tools, the last one a
//! code agent that writes, runs and debugs its own analysis script) and a `sandbox-evaluator` (LLM
//! interpretation, a reasoning step, a decision and scores computed from what happened).

use base64::Engine as _;
use serde::Serialize;
use serde_json::json;
use waxell::llm::{ChatRequest, ChatResponse, Client, Message, Tool};
use waxell::sandbox::{Execution, RunOptions, Sandbox, SandboxBackend, SandboxError, SandboxOptions};
use waxell::{agent, decision, reasoning, tool, Decision, DecisionOptions, Reasoning};

use crate::progress::Progress;
use crate::script::{self, ATTEMPT_LIMIT_REACHED, CHART_FILE};

/// Everything the agents need.
pub struct Env<'a> {
    pub llm: &'a Client,
    pub model: String,
    /// Stream the LLM's answers instead of waiting for whole responses.
    pub stream: bool,
    pub max_attempts: u32,
    pub progress: &'a Progress,
    pub output_dir: std::path::PathBuf,
}

pub type DemoResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

impl Env<'_> {
    /// One LLM call, streamed or not; either way the whole response.
    async fn ask(&self, request: ChatRequest) -> Result<ChatResponse, waxell::llm::Error> {
        if self.stream {
            self.llm.chat_stream(request).await?.into_response().await
        } else {
            self.llm.chat(request).await
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BasicResult {
    pub sandbox_id: String,
    pub stdout: String,
    pub has_error: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatisticsResult {
    pub code_type: &'static str,
    pub stdout: String,
    pub has_error: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorTestResult {
    pub has_error: bool,
    pub error_type: Option<String>,
}

/// One attempt of the code agent.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub number: u32,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AnalysisResult {
    pub succeeded: bool,
    pub attempts: Vec<Attempt>,
    pub stdout: String,
    pub summary: String,
    /// Where the chart was saved on the host, if the script produced one.
    pub chart_path: Option<String>,
    /// Whether the saved chart is a valid PNG (signature and IHDR chunk).
    pub chart_is_png: bool,
    /// Files the script left in the sandbox's working directory.
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunnerReport {
    pub backend: &'static str,
    pub basic: BasicResult,
    pub statistics: StatisticsResult,
    pub error_test: ErrorTestResult,
    pub analysis: AnalysisResult,
}

fn joined(execution: &Execution) -> String {
    execution.logs.stdout.concat()
}

#[tool(tool_type = "sandbox")]
/// Execute basic code in the sandbox to verify connectivity.
async fn run_basic_code(sandbox: &Sandbox, code: &str) -> Result<BasicResult, SandboxError> {
    let result = sandbox.run_code(code, &RunOptions::default()).await?;
    Ok(BasicResult {
        sandbox_id: sandbox.sandbox_id().to_owned(),
        stdout: joined(&result),
        has_error: result.error.is_some(),
    })
}

#[tool(tool_type = "sandbox")]
/// Execute a statistical computation in the sandbox.
async fn run_statistics(sandbox: &Sandbox, code: &str) -> Result<StatisticsResult, SandboxError> {
    let result = sandbox.run_code(code, &RunOptions::default()).await?;
    Ok(StatisticsResult {
        code_type: "statistics",
        stdout: joined(&result),
        has_error: result.error.is_some(),
    })
}

#[tool(tool_type = "sandbox")]
/// Execute code expected to fail, testing the sandbox's error handling.
async fn run_error_test(sandbox: &Sandbox, code: &str) -> Result<ErrorTestResult, SandboxError> {
    let result = sandbox.run_code(code, &RunOptions::default()).await?;
    Ok(ErrorTestResult {
        has_error: result.error.is_some(),
        error_type: result.error.map(|e| e.name),
    })
}

/// The last `max` characters of `text` (a traceback's end says the most).
fn tail(text: &str, max: usize) -> &str {
    let skip = text.chars().count().saturating_sub(max);
    text.char_indices().nth(skip).map_or("", |(i, _)| &text[i..])
}

/// What the sandbox reports back to the LLM as the `run_code` tool result.
fn tool_result_text(execution: &Execution) -> String {
    let stdout = joined(execution);
    match &execution.error {
        Some(e) => format!(
            "ERROR {}: {}\n{}\nstdout before the error:\n{}",
            e.name,
            e.value,
            tail(&e.traceback, 1500),
            stdout
        ),
        None => format!(
            "OK\nstdout:\n{stdout}\nresults: {}",
            execution.text().unwrap_or("(none)")
        ),
    }
}

#[tool(tool_type = "sandbox", name = "run_code", skip(sandbox))]
/// Run one script the LLM wrote (one attempt of the code agent).
async fn run_generated_code(sandbox: &Sandbox, attempt: u32, code: &str) -> Result<Execution, SandboxError> {
    // `attempt` is an argument for the trace: it is captured on this span.
    let _ = attempt;
    sandbox.run_code(code, &RunOptions::default()).await
}

fn is_png(bytes: &[u8]) -> bool {
    bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR"
}

#[tool(tool_type = "sandbox", skip(env, sandbox))]
/// The code agent: the LLM gets the sandbox as a `run_code` tool and writes one complete analysis of the
/// monthly sales; an error goes back to it as the tool result, and it retries up to a limit.
async fn analyze_sales(env: &Env<'_>, sandbox: &Sandbox, sales: &[f64]) -> DemoResult<AnalysisResult> {
    let run_code = Tool::function(
        "run_code",
        "Run a complete Python script in an isolated sandbox (pandas, numpy and matplotlib are installed). \
         Returns stdout, the value of the last expression, or the error with its traceback.",
        json!({"type": "object", "properties": {"code": {"type": "string", "description": "the Python script"}}, "required": ["code"]}),
    );
    let mut messages = vec![
        Message::system(format!(
            "You are a data analyst. Write ONE complete Python script and run it with the run_code tool. The \
             script must: compute statistics (mean, median, standard deviation, min, max), month-over-month \
             growth rates, identify the trend, print clear results, save a line chart to '{CHART_FILE}', and \
             save the per-month table to 'sales_analysis.csv'. If the tool reports an error, fix the script \
             and run it again. When it has run successfully, answer with a two-sentence summary."
        )),
        Message::user(format!("Monthly sales for {:?}: {:?}", script::MONTHS, sales)),
    ];
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut last_ok: Option<Execution> = None;
    let mut summary = String::new();
    // Each LLM turn either runs a script (a tool call) or answers; bound the turns as well as the attempts.
    for _turn in 0..(env.max_attempts * 2 + 1) {
        let request = ChatRequest::new(messages.clone())
            .model(env.model.clone())
            .tools([run_code.clone()]);
        let response = env
            .progress
            .spin("sandbox-runner ▸ waiting for the LLM", env.ask(request))
            .await?;
        let calls = response.tool_calls().to_vec();
        if calls.is_empty() {
            summary = response.text().unwrap_or_default().to_owned();
            break;
        }
        messages.push(Message::assistant_tool_calls(calls.clone()));
        for call in calls {
            let code: String = call
                .parse_arguments::<serde_json::Value>()
                .ok()
                .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_owned))
                .unwrap_or_default();
            if attempts.len() as u32 >= env.max_attempts {
                messages.push(Message::tool(call.id.clone(), ATTEMPT_LIMIT_REACHED));
                continue;
            }
            let number = attempts.len() as u32 + 1;
            let execution = env
                .progress
                .spin(
                    &format!("sandbox-runner ▸ run_code attempt {number}"),
                    run_generated_code(sandbox, number, &code),
                )
                .await?;
            let error = execution
                .error
                .as_ref()
                .map(|e| format!("{}: {}", e.name, e.value));
            env.progress.note(&match &error {
                Some(e) => format!(
                    "sandbox-runner ▸ attempt {number} failed: {e}; sending the error back to the LLM"
                ),
                None => format!("sandbox-runner ▸ attempt {number} succeeded"),
            });
            messages.push(Message::tool(call.id.clone(), tool_result_text(&execution)));
            attempts.push(Attempt {
                number,
                error: error.clone(),
            });
            if error.is_none() {
                last_ok = Some(execution);
            }
        }
    }
    let Some(execution) = last_ok else {
        return Ok(AnalysisResult {
            succeeded: false,
            attempts,
            stdout: String::new(),
            summary,
            chart_path: None,
            chart_is_png: false,
            files: Vec::new(),
        });
    };
    // The chart: the file the script saved, else the figure the sandbox returned as a PNG result.
    let chart = match sandbox.read_file(CHART_FILE).await {
        Ok(bytes) => Some(bytes),
        Err(_) => execution
            .results
            .iter()
            .find_map(|r| r.png.as_deref())
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok()),
    };
    let mut chart_path = None;
    let mut chart_is_png = false;
    if let Some(bytes) = chart {
        std::fs::create_dir_all(&env.output_dir)?;
        let path = env.output_dir.join(CHART_FILE);
        std::fs::write(&path, &bytes)?;
        chart_is_png = is_png(&bytes);
        chart_path = Some(path.display().to_string());
    }
    let files = sandbox
        .list_files(".")
        .await
        .map(|entries| {
            entries
                .into_iter()
                .filter(|e| !e.is_dir)
                .map(|e| e.name)
                .collect()
        })
        .unwrap_or_default();
    Ok(AnalysisResult {
        succeeded: true,
        attempts,
        stdout: joined(&execution),
        summary,
        chart_path,
        chart_is_png,
        files,
    })
}

#[agent(name = "sandbox-runner", skip(env, backend))]
/// Creates a sandbox, executes code in it and handles its errors, and kills it afterwards.
async fn sandbox_runner(env: &Env<'_>, backend: &dyn SandboxBackend) -> DemoResult<RunnerReport> {
    let options = SandboxOptions::new().with_timeout(std::time::Duration::from_secs(600));
    let sandbox = env
        .progress
        .spin(
            "sandbox-runner ▸ creating the sandbox",
            Sandbox::create(backend, &options),
        )
        .await?;
    env.progress.note(&format!(
        "sandbox-runner ▸ sandbox {} ({}) ready",
        sandbox.sandbox_id(),
        sandbox.backend()
    ));
    let report = run_tools(env, &sandbox).await;
    if let Err(e) = sandbox.kill().await {
        env.progress.note(&format!(
            "sandbox-runner ▸ warning: could not kill the sandbox: {e}"
        ));
    }
    report
}

async fn run_tools(env: &Env<'_>, sandbox: &Sandbox) -> DemoResult<RunnerReport> {
    let p = env.progress;
    p.note("sandbox-runner ▸ run_basic_code");
    let basic = run_basic_code(sandbox, script::BASIC_CODE).await?;
    p.note("sandbox-runner ▸ run_statistics");
    let statistics = run_statistics(sandbox, &script::statistics_code()).await?;
    p.note("sandbox-runner ▸ run_error_test");
    let error_test = run_error_test(sandbox, script::ERROR_CODE).await?;
    p.note("sandbox-runner ▸ analyze_sales (the LLM writes and debugs its own script)");
    let analysis = analyze_sales(env, sandbox, &script::SALES).await?;
    Ok(RunnerReport {
        backend: sandbox.backend(),
        basic,
        statistics,
        error_test,
        analysis,
    })
}

/// What the evaluator measures, computed from the runner's report.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionSummary {
    pub total_executions: u32,
    pub successful: u32,
    pub errors_caught: u32,
    pub unexpected_errors: u32,
    pub analysis_attempts: u32,
    pub tasks_as_intended: u32,
    pub output_checks: Vec<(String, bool)>,
}

impl ExecutionSummary {
    pub fn from_report(r: &RunnerReport) -> Self {
        let a = &r.analysis;
        let failed_attempts = a.attempts.iter().filter(|x| x.error.is_some()).count() as u32;
        let clean = [!r.basic.has_error, !r.statistics.has_error]
            .iter()
            .filter(|ok| **ok)
            .count() as u32;
        let total = 3 + a.attempts.len() as u32;
        let successful = clean + u32::from(a.succeeded);
        let intended = [
            !r.basic.has_error && r.basic.stdout.contains("hello from the sandbox"),
            !r.statistics.has_error && r.statistics.stdout.contains("mean="),
            r.error_test.error_type.as_deref() == Some("ZeroDivisionError"),
            a.succeeded,
        ];
        let stdout = a.stdout.to_lowercase();
        let output_checks = vec![
            (
                "statistics printed".to_owned(),
                stdout.contains("mean") && (stdout.contains("std") || stdout.contains("deviation")),
            ),
            ("month-over-month growth".to_owned(), stdout.contains("growth")),
            ("trend identified".to_owned(), stdout.contains("trend")),
            ("chart is a valid PNG".to_owned(), a.chart_is_png),
            (
                "table saved as CSV".to_owned(),
                a.files.iter().any(|f| f.ends_with(".csv")),
            ),
        ];
        Self {
            total_executions: total,
            successful,
            errors_caught: u32::from(r.error_test.has_error) + failed_attempts,
            unexpected_errors: u32::from(r.basic.has_error)
                + u32::from(r.statistics.has_error)
                + failed_attempts,
            analysis_attempts: a.attempts.len() as u32,
            tasks_as_intended: intended.iter().filter(|ok| **ok).count() as u32,
            output_checks,
        }
    }

    pub fn output_quality(&self) -> f64 {
        let passed = self.output_checks.iter().filter(|(_, ok)| *ok).count();
        passed as f64 / self.output_checks.len().max(1) as f64
    }
}

#[reasoning(step = "execution_quality_assessment")]
fn assess_execution_quality(summary: &ExecutionSummary) -> Reasoning {
    let passed: Vec<&str> = summary
        .output_checks
        .iter()
        .filter(|(_, ok)| *ok)
        .map(|(n, _)| n.as_str())
        .collect();
    let missing: Vec<&str> = summary
        .output_checks
        .iter()
        .filter(|(_, ok)| !*ok)
        .map(|(n, _)| n.as_str())
        .collect();
    let conclusion = match (summary.tasks_as_intended, missing.is_empty()) {
        (4, true) => {
            "Sandbox execution is reliable: every task behaved as intended and errors were handled".to_owned()
        }
        (4, false) => format!(
            "Execution is reliable but the output is incomplete: missing {}",
            missing.join(", ")
        ),
        (n, _) => format!("Execution is unreliable: only {n}/4 tasks behaved as intended"),
    };
    Reasoning::new(format!(
        "Executed {} code snippets. {}/{} completed successfully; the analysis needed {} attempt(s).",
        summary.total_executions, summary.successful, summary.total_executions, summary.analysis_attempts
    ))
    .evidence(format!("successful_runs: {}", summary.successful))
    .evidence(format!("errors_caught: {}", summary.errors_caught))
    .evidence(format!("tasks_as_intended: {}/4", summary.tasks_as_intended))
    .evidence(format!("output_checks_passed: {}", passed.join(", ")))
    .conclusion(conclusion)
}

/// How to present the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, DecisionOptions)]
pub enum OutputFormat {
    MarkdownWithChart,
    MarkdownTable,
    PlainText,
}

#[decision(name = "output_format", options = OutputFormat)]
fn choose_output_format(summary: &ExecutionSummary, has_chart: bool) -> Decision<OutputFormat> {
    let quality = summary.output_quality();
    let (chosen, reasoning) = if has_chart && quality >= 0.8 {
        (
            OutputFormat::MarkdownWithChart,
            "a valid chart and complete statistics are available",
        )
    } else if quality >= 0.4 {
        (
            OutputFormat::MarkdownTable,
            "statistics are available but the chart is missing or output incomplete",
        )
    } else {
        (
            OutputFormat::PlainText,
            "too little structured output for a table",
        )
    };
    // Confidence follows how much of the expected output is there.
    Decision::new(chosen)
        .reasoning(reasoning)
        .confidence(0.5 + 0.5 * quality)
}

/// What the evaluator concluded.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub interpretation: String,
    pub conclusion: String,
    pub output_format: &'static str,
    pub scores: Vec<(String, f64, String)>,
}

#[agent(name = "sandbox-evaluator", skip(env))]
/// Interprets the results with the LLM and scores their quality.
async fn sandbox_evaluator(env: &Env<'_>, report: &RunnerReport) -> DemoResult<Evaluation> {
    let request = ChatRequest::new([
        Message::system(
            "You are the sandbox-evaluator. Interpret the results of code executed in a sandbox for a \
             business reader: what the data shows, whether the execution was reliable, and any caveats.",
        ),
        Message::user(serde_json::to_string_pretty(report)?),
    ])
    .model(env.model.clone());
    let interpretation = env
        .progress
        .spin(
            "sandbox-evaluator ▸ asking the LLM to interpret",
            env.ask(request),
        )
        .await?;
    let interpretation = interpretation.text().unwrap_or_default().to_owned();

    let summary = ExecutionSummary::from_report(report);
    let reasoning = assess_execution_quality(&summary);
    let format = choose_output_format(&summary, report.analysis.chart_is_png);

    let reliability = f64::from(summary.tasks_as_intended) / 4.0;
    let first_try = f64::from(u32::from(
        summary.analysis_attempts == 1 && report.analysis.succeeded,
    ));
    let quality = summary.output_quality();
    let missing: Vec<&str> = summary
        .output_checks
        .iter()
        .filter(|(_, ok)| !*ok)
        .map(|(n, _)| n.as_str())
        .collect();
    let scores = vec![
        (
            "execution_reliability".to_owned(),
            reliability,
            format!(
                "{}/4 tasks behaved as intended, {} error(s) caught",
                summary.tasks_as_intended, summary.errors_caught
            ),
        ),
        (
            "output_quality".to_owned(),
            quality,
            if missing.is_empty() {
                "all expected outputs present".to_owned()
            } else {
                format!("missing: {}", missing.join(", "))
            },
        ),
        (
            "first_attempt_success".to_owned(),
            first_try,
            format!(
                "the analysis script needed {} attempt(s)",
                summary.analysis_attempts
            ),
        ),
    ];
    for (name, value, comment) in &scores {
        waxell::score_with_comment(name, *value, comment);
    }
    waxell::score("self_debug_attempts", summary.analysis_attempts);
    Ok(Evaluation {
        interpretation,
        conclusion: reasoning.conclusion,
        output_format: format.chosen.as_str(),
        scores,
    })
}

/// What the whole run produced (serialised as the orchestrator's output in the trace).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub report: RunnerReport,
    pub evaluation: Evaluation,
    pub trace_id: Option<String>,
}

#[agent(name = "code-sandbox-agent", skip(env, backend))]
/// Orchestrates the sandbox-runner and the sandbox-evaluator.
pub async fn orchestrator(env: &Env<'_>, backend: &dyn SandboxBackend) -> DemoResult<Outcome> {
    waxell::tag("demo", "code-sandbox-agent");
    waxell::metadata("sandbox_backend", backend.name());
    let trace_id = waxell::current_trace_id();
    let report = sandbox_runner(env, backend).await?;
    let evaluation = sandbox_evaluator(env, &report).await?;
    Ok(Outcome {
        report,
        evaluation,
        trace_id,
    })
}
