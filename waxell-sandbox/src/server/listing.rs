//! `GET /v2/sandboxes` and `GET /snapshots` as E2B's SDKs call them: filters (`metadata` as a
//! URL-encoded `key=value&...` string, `state`, `template`, `startedAfter`), order by start time
//! (newest first unless `order=asc`), and pages of `limit` items continued with `nextToken`, whose
//! next value comes back in the `X-Next-Token` header (absent on the last page).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::error::ApiError;

/// Items per page when the request does not say (E2B: 100, also the most).
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 100;

/// The query of a list request.
#[derive(Debug, Default)]
pub(crate) struct ListQuery {
    pub(crate) metadata: BTreeMap<String, String>,
    /// Empty: every state.
    pub(crate) states: Vec<String>,
    pub(crate) template: Option<String>,
    pub(crate) started_after: Option<SystemTime>,
    pub(crate) ascending: bool,
    pub(crate) limit: usize,
    pub(crate) next_token: Option<String>,
    /// `GET /snapshots`: the sandbox a snapshot was taken of, and its name.
    pub(crate) sandbox_id: Option<String>,
    pub(crate) name: Option<String>,
}

/// Percent-decoding only (`+` stays a plus).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn pairs(raw: &str) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(raw).map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))
}

impl ListQuery {
    pub(crate) fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        let mut query = Self {
            limit: DEFAULT_LIMIT,
            ..Self::default()
        };
        for (key, value) in pairs(raw.unwrap_or(""))? {
            match key.as_str() {
                // Decoded once as the query string and once as a `k=v&...` string; the SDKs
                // encode each key and value once more (Python: `urlencode({quote(k): quote(v)})`).
                "metadata" => {
                    for (k, v) in pairs(&value)? {
                        query.metadata.insert(unescape(&k), unescape(&v));
                    }
                }
                "state" => query.states.extend(
                    value
                        .split(',')
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| !s.is_empty()),
                ),
                "template" => query.template = Some(value),
                "startedAfter" => query.started_after = Some(parse_time(&value)?),
                "order" => {
                    query.ascending = match value.as_str() {
                        "asc" => true,
                        "desc" => false,
                        other => {
                            return Err(ApiError::bad_request(format!(
                                "order {other:?}: expected asc or desc"
                            )))
                        }
                    }
                }
                "limit" => {
                    query.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            ApiError::bad_request(format!("limit {value:?}: expected 1..={MAX_LIMIT}"))
                        })?
                }
                "nextToken" => query.next_token = Some(value).filter(|t| !t.is_empty()),
                "sandboxID" => query.sandbox_id = Some(value),
                "name" => query.name = Some(value),
                _ => {}
            }
        }
        for state in &query.states {
            if state != "running" && state != "paused" {
                return Err(ApiError::bad_request(format!(
                    "state {state:?}: expected running or paused"
                )));
            }
        }
        Ok(query)
    }

    /// Whether an item with this metadata, state and template passes the filters.
    pub(crate) fn matches(
        &self,
        metadata: &BTreeMap<String, String>,
        state: &str,
        template: &str,
        started_at: SystemTime,
    ) -> bool {
        self.metadata.iter().all(|(k, v)| metadata.get(k) == Some(v))
            && (self.states.is_empty() || self.states.iter().any(|s| s == state))
            && self.template.as_ref().is_none_or(|t| t == template)
            // Whole seconds, as start times are reported.
            && self.started_after.is_none_or(|after| whole_seconds(started_at) >= whole_seconds(after))
    }
}

fn whole_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// An RFC 3339 time with `Z` or a numeric offset (Python's `isoformat()`).
fn parse_time(value: &str) -> Result<SystemTime, ApiError> {
    let bad = || ApiError::bad_request(format!("startedAfter {value:?}: expected an RFC 3339 time"));
    let value = value.trim();
    let (local, offset_secs) =
        if let Some(local) = value.strip_suffix('Z').or_else(|| value.strip_suffix('z')) {
            (local, 0i64)
        } else if value.len() > 6 && matches!(value.as_bytes()[value.len() - 6], b'+' | b'-') {
            let (local, offset) = value.split_at(value.len() - 6);
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let hours: i64 = offset[1..3].parse().map_err(|_| bad())?;
            let minutes: i64 = offset[4..6].parse().map_err(|_| bad())?;
            (local, sign * (hours * 3600 + minutes * 60))
        } else {
            (value, 0)
        };
    let time = humantime::parse_rfc3339_weak(local).map_err(|_| bad())?;
    // Local time = UTC + offset.
    Ok(if offset_secs >= 0 {
        time - Duration::from_secs(offset_secs as u64)
    } else {
        time + Duration::from_secs(offset_secs.unsigned_abs())
    })
}

/// One listed item, with what ordering and paging need.
pub(crate) struct Listed<T> {
    pub(crate) id: String,
    pub(crate) at: SystemTime,
    pub(crate) item: T,
}

fn cursor<T>(item: &Listed<T>) -> String {
    let nanos = item
        .at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{nanos}.{}", item.id)
}

/// The page `query` asks for, in its order, and the token of the next page if there is one.
pub(crate) fn page<T>(mut items: Vec<Listed<T>>, query: &ListQuery) -> (Vec<T>, Option<String>) {
    items.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
    if !query.ascending {
        items.reverse();
    }
    let start = match &query.next_token {
        // The token is the last item of the previous page: start after it.
        Some(token) => items
            .iter()
            .position(|i| &cursor(i) == token)
            .map_or(items.len(), |p| p + 1),
        None => 0,
    };
    let rest: Vec<Listed<T>> = items.into_iter().skip(start).collect();
    let more = rest.len() > query.limit;
    let page: Vec<Listed<T>> = rest.into_iter().take(query.limit).collect();
    let next = if more { page.last().map(cursor) } else { None };
    (page.into_iter().map(|i| i.item).collect(), next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_double_encoded_metadata_and_states_are_read() {
        // Python: urlencode({quote(k): quote(v)}) sent as one query parameter.
        let q = ListQuery::parse(Some(
            "metadata=user%3Dabc%252520d%25252B%26app%3Dprod&state=running,paused&limit=1",
        ))
        .unwrap();
        assert_eq!(q.metadata.get("user").map(String::as_str), Some("abc d+"));
        assert_eq!(q.metadata.get("app").map(String::as_str), Some("prod"));
        assert_eq!(q.states, ["running", "paused"]);
        assert_eq!(q.limit, 1);
        assert!(ListQuery::parse(Some("state=gone")).is_err());
        assert!(ListQuery::parse(Some("limit=0")).is_err());
    }

    #[test]
    fn times_with_offsets_are_utc() {
        let z = parse_time("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(
            parse_time("2026-01-02T04:04:05.250+01:00").unwrap(),
            z + Duration::from_millis(250)
        );
        assert_eq!(parse_time("2026-01-02T03:04:05+00:00").unwrap(), z);
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn pages_follow_the_token_newest_first() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let items = |n: u64| -> Vec<Listed<u64>> {
            (0..n)
                .map(|i| Listed {
                    id: format!("s{i}"),
                    at: t0 + Duration::from_secs(i),
                    item: i,
                })
                .collect()
        };
        let mut q = ListQuery::parse(Some("limit=2")).unwrap();
        let (first, next) = page(items(5), &q);
        assert_eq!(first, [4, 3]);
        q.next_token = next;
        let (second, next) = page(items(5), &q);
        assert_eq!(second, [2, 1]);
        q.next_token = next;
        let (third, next) = page(items(5), &q);
        assert_eq!((third, next), (vec![0], None));
        q.ascending = true;
        q.next_token = None;
        assert_eq!(page(items(3), &q).0, [0, 1]);
    }
}
