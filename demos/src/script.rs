//! The data, the fixed snippets the runner's first three tools execute, and the scripted LLM of `--dry-run`
//! (and its cells as one plain Python program, for the benchmark).
//!
//! The scripted LLM behaves like a real one would on this task: its first analysis script has a realistic
//! bug (a wrong column name), the sandbox reports the `KeyError`, the error goes back as the tool result,
//! and the second script works. Every line of these scripts really runs in the sandbox.

use serde_json::json;
use waxell::llm::{ChatRequest, DataStream, Error, ScriptedReply, ScriptedTransport, Transport};

/// Modules the analysis imports (the scripted one and, as its prompt says, the live LLM's).
pub const REQUIRED_MODULES: [&str; 3] = ["pandas", "numpy", "matplotlib"];

/// Monthly sales the code agent analyses.
pub const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
pub const SALES: [f64; 12] = [
    12000.0, 13500.0, 12800.0, 15200.0, 16100.0, 15800.0, 17400.0, 18900.0, 18200.0, 19800.0, 21500.0,
    23100.0,
];

/// Where the analysis script saves its chart, inside the sandbox's working directory.
pub const CHART_FILE: &str = "sales_chart.png";

/// The tool result once the code agent has used up its attempts (the scripted LLM answers it with a summary).
pub const ATTEMPT_LIMIT_REACHED: &str = "ERROR attempt limit reached; answer with what you have";

pub const BASIC_CODE: &str = "import sys, platform\nprint('hello from the sandbox')\nprint(f'python {platform.python_version()} on {sys.platform}')";

pub fn statistics_code() -> String {
    format!(
        "import statistics as st\n\
         data = {data:?}\n\
         print(f'n={{len(data)}} mean={{st.mean(data):.2f}} median={{st.median(data):.2f}} stdev={{st.stdev(data):.2f}}')\n\
         print(f'min={{min(data):.0f}} max={{max(data):.0f}} range={{max(data) - min(data):.0f}}')",
        data = SALES.to_vec()
    )
}

/// Fails on purpose: the runner checks the sandbox reports the error with its name.
pub const ERROR_CODE: &str = "values = [3, 1, 0]\nratios = [10 / v for v in values]\nprint(ratios)";

fn data_prelude() -> String {
    format!("months = {:?}\nsales = {:?}\n", MONTHS.to_vec(), SALES.to_vec())
}

/// The analysis as a careless first draft would write it: the column is `sales`, not `Sales`.
pub fn buggy_analysis_script() -> String {
    format!(
        "import pandas as pd\n\
         {prelude}\
         df = pd.DataFrame({{'month': months, 'sales': sales}})\n\
         stats = df['Sales'].describe()\n\
         print(stats)\n",
        prelude = data_prelude()
    )
}

/// The corrected, complete analysis: statistics, month-over-month growth, trend, a chart and a CSV.
pub fn fixed_analysis_script() -> String {
    format!(
        r#"import json
import numpy as np
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

{prelude}df = pd.DataFrame({{"month": months, "sales": sales}})
df["mom_growth_pct"] = df["sales"].pct_change() * 100

stats = {{
    "mean": round(float(df["sales"].mean()), 2),
    "median": round(float(df["sales"].median()), 2),
    "std": round(float(df["sales"].std()), 2),
    "min": float(df["sales"].min()),
    "max": float(df["sales"].max()),
    "best_month": df.loc[df["sales"].idxmax(), "month"],
    "worst_month": df.loc[df["sales"].idxmin(), "month"],
    "avg_mom_growth_pct": round(float(df["mom_growth_pct"].mean()), 2),
}}
slope, intercept = np.polyfit(np.arange(len(df)), df["sales"], 1)
stats["trend"] = "upward" if slope > 0 else "downward"
stats["trend_per_month"] = round(float(slope), 1)

print("=== Monthly sales analysis ===")
print(f"mean={{stats['mean']:.2f}} median={{stats['median']:.2f}} std={{stats['std']:.2f}}")
print(f"min={{stats['min']:.0f}} ({{stats['worst_month']}})  max={{stats['max']:.0f}} ({{stats['best_month']}})")
print("month-over-month growth (%):")
print(df[["month", "sales", "mom_growth_pct"]].round(2).to_string(index=False))
print(f"trend: {{stats['trend']}}, {{stats['trend_per_month']:+.1f}} per month; average growth {{stats['avg_mom_growth_pct']:.2f}}%")

fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(df["month"], df["sales"], marker="o", label="sales")
ax.plot(df["month"], intercept + slope * np.arange(len(df)), linestyle="--", label="trend")
ax.set_title("Monthly sales")
ax.set_ylabel("sales")
ax.legend()
fig.tight_layout()
fig.savefig("{chart}", dpi=100)

df.to_csv("sales_analysis.csv", index=False)
with open("summary.json", "w") as f:
    json.dump(stats, f, indent=2)
stats
"#,
        prelude = data_prelude(),
        chart = CHART_FILE
    )
}

/// `cells` as one plain Python program, for the demo's benchmark anchor (the cells' own work, without the
/// sandbox): each runs in one `__main__` namespace as the kernel runs it, an error's traceback is printed, and
/// figures left open are rendered as PNG, as the kernel shows them.
pub fn as_plain_python(cells: &[String]) -> String {
    let mut program = String::from(
        "import io, sys, traceback\n\
         namespace = {'__name__': '__main__'}\n\
         def show_open_figures():\n    \
             plt = sys.modules.get('matplotlib.pyplot')\n    \
             for number in (plt.get_fignums() if plt else []):\n        \
                 plt.figure(number).savefig(io.BytesIO(), format='png')\n    \
             if plt:\n        plt.close('all')\n",
    );
    for cell in cells {
        // A JSON string is a Python string literal.
        let literal = serde_json::Value::String(cell.clone()).to_string();
        program.push_str(&format!(
            "try:\n    exec(compile({literal}, '<cell>', 'exec'), namespace)\n\
             except Exception:\n    traceback.print_exc()\n\
             show_open_figures()\n"
        ));
    }
    program
}

/// The scripted LLM for `--dry-run`: the code agent's two attempts and final answer, and the evaluator's
/// interpretation. Replies are matched to requests, so the order of calls does not matter.
pub fn dry_run_transport() -> DryRunScript {
    DryRunScript { replies: replies() }
}

fn replies() -> ScriptedTransport {
    let is_evaluator = |r: &waxell::llm::ChatRequest| r.system_text().contains("sandbox-evaluator");
    ScriptedTransport::new([
        ScriptedReply::text(
            "Interpretation: the sandbox executed all four tasks. Sales rose from 12,000 in January to 23,100 in \
             December with a steady upward trend; growth was positive in 8 of 11 months. The intentional \
             ZeroDivisionError was caught and reported, and the analysis script recovered from a KeyError on \
             its second attempt. The results are reliable and complete enough to present with the chart.",
        )
        .with_usage(420, 96)
        .when(is_evaluator),
        ScriptedReply::text(
            "The analysis ran successfully: average monthly sales are about 17,025 with an upward trend of \
             roughly 900 per month; the chart and a CSV with month-over-month growth are in the sandbox.",
        )
        .with_usage(610, 58)
        .when(|r| !r.system_text().contains("sandbox-evaluator") && last_tool_result_succeeded(r)),
        ScriptedReply::tool_call("run_code", json!({ "code": fixed_analysis_script() }))
            .with_usage(540, 410)
            .when(|r| r.has_tool_results()),
        ScriptedReply::tool_call("run_code", json!({ "code": buggy_analysis_script() })).with_usage(310, 180),
    ])
}

/// Whether the conversation's last message is a tool result that reports success.
fn last_tool_result_succeeded(request: &waxell::llm::ChatRequest) -> bool {
    request
        .messages
        .last()
        .filter(|m| m.role() == "tool")
        .and_then(|m| m.text())
        .is_some_and(|t| t.starts_with("OK"))
}

/// What the sandbox must answer to each of the script's `run_code` calls, in order, for the script to go on.
const EXPECTED: [(&str, &str); 2] = [
    ("first (buggy) analysis script", "ERROR KeyError"),
    ("second (fixed) analysis script", "OK"),
];

/// The dry run's LLM: the scripted replies, plus a check that the sandbox answered the scripts the way the
/// script expects. A script cannot adapt like a model, so when the sandbox answers otherwise (say, pandas is
/// missing) the run stops with what the sandbox said, instead of a bare "no scripted reply".
#[derive(Debug, Clone)]
pub struct DryRunScript {
    replies: ScriptedTransport,
}

impl DryRunScript {
    fn check(request: &ChatRequest) -> Result<(), Error> {
        let results = request.messages.iter().filter(|m| m.role() == "tool");
        for (n, (result, (script, expected))) in results.zip(EXPECTED).enumerate() {
            let answer = result.text().unwrap_or_default();
            if answer.starts_with(expected) {
                continue;
            }
            if answer.starts_with(ATTEMPT_LIMIT_REACHED) {
                return Err(Error::Script(format!(
                    "--max-attempts stopped the code agent after {n} attempt(s); the dry run's script needs {} \
                     (a failing script, then its fix)",
                    EXPECTED.len()
                )));
            }
            let first_line = answer.lines().next().unwrap_or_default();
            let answered = match first_line.strip_prefix("ERROR ") {
                Some(error) => format!("raised {error}"),
                None if first_line == "OK" => "ran it without an error".to_owned(),
                None => format!("answered {first_line:?}"),
            };
            let wanted = match expected.strip_prefix("ERROR ") {
                Some(error) => format!("a {error} (the bug it fixes next)"),
                None => "a clean run".to_owned(),
            };
            return Err(Error::Script(format!(
                "the dry run stopped at run_code attempt {attempt}: the sandbox {answered} for the dry run's \
                 {script}, but the dry run's script expected {wanted} and cannot adapt like a model would. \
                 Check that the sandbox's Python has {modules} (docs/sandbox.md), or run live with a model",
                attempt = n + 1,
                modules = REQUIRED_MODULES.join(", "),
            )));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Transport for DryRunScript {
    async fn send(&self, request: &ChatRequest) -> Result<String, Error> {
        Self::check(request)?;
        self.replies.send(request).await
    }

    async fn send_streaming(&self, request: &ChatRequest) -> Result<DataStream, Error> {
        Self::check(request)?;
        self.replies.send_streaming(request).await
    }

    fn is_dry_run(&self) -> bool {
        true
    }
}
