//! `Retry-After` as both HTTP clients (LLM and E2B) read it: delta-seconds (fractions accepted, as some
//! servers send them) or an HTTP-date (RFC 9110 §10.2.3), which becomes the time left until then. A value
//! too large for a `Duration`, negative or unreadable is ignored rather than trusted or panicked on.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// The wait `Retry-After` asks for, if the response has one we can read.
pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Duration> {
    parse(headers.get("retry-after")?.to_str().ok()?, SystemTime::now())
}

/// A header value holding a number of `unit`s (e.g. OpenAI's `retry-after-ms`).
#[cfg(feature = "llm")]
pub(crate) fn number(headers: &HeaderMap, name: &str, unit: Duration) -> Option<Duration> {
    let value: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
    seconds(value * unit.as_secs_f64())
}

fn parse(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(value) = value.parse::<f64>() {
        return seconds(value);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    // A date already past means "now".
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn seconds(value: f64) -> Option<Duration> {
    if value < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_dates_and_nonsense() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 10:00:00 GMT").unwrap();
        assert_eq!(parse("2", now), Some(Duration::from_secs(2)));
        assert_eq!(parse(" 0.5 ", now), Some(Duration::from_millis(500)));
        assert_eq!(
            parse("Sun, 22 Nov 2026 10:00:07 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(parse("Sun, 22 Nov 2026 09:59:00 GMT", now), Some(Duration::ZERO));
        for nonsense in ["-1", "soon", "", "NaN", "inf", "1e300"] {
            assert_eq!(parse(nonsense, now), None, "{nonsense:?}");
        }
    }

    #[cfg(feature = "llm")]
    #[test]
    fn numbers_in_other_units() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(
            number(&headers, "retry-after-ms", Duration::from_millis(1)),
            Some(Duration::from_millis(250))
        );
        headers.insert("retry-after-ms", "1e300".parse().unwrap());
        assert_eq!(number(&headers, "retry-after-ms", Duration::from_millis(1)), None);
    }
}
