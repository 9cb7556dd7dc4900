//! The `get_weather` tool as a rig-agent tool, for the rig-agent test and example.

use rig_agent::tool::{Tool, ToolContext};

#[derive(serde::Deserialize)]
pub(crate) struct City {
    city: String,
}

#[derive(Debug)]
pub(crate) struct NoWeather;

impl std::fmt::Display for NoWeather {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no weather for this city")
    }
}

impl std::error::Error for NoWeather {}

/// Answers `Sunny in {city}`, followed by `note`.
pub(crate) struct Weather {
    pub(crate) note: String,
}

impl Tool for Weather {
    const NAME: &'static str = "get_weather";
    type Error = NoWeather;
    type Args = City;
    type Output = String;

    fn description(&self) -> String {
        "The weather of a city".to_owned()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }

    async fn call(&self, _context: &mut ToolContext, args: City) -> Result<String, NoWeather> {
        Ok(format!("Sunny in {}{}", args.city, self.note))
    }
}
