//! Capturing arguments and return values without demanding any trait bound from the user.
//!
//! The macros call `(&&&Probe(&value)).__waxell_capture()`. Method resolution by auto-reference picks
//! the most capable implementation the value's type has: JSON through `Serialize`, else `Debug`, else
//! the type's name. Outcomes of `Result` values (error detection without requiring `Display`) use the
//! same technique in [`outcome`].

use std::fmt::{Debug, Display};

use serde::Serialize;

/// A captured value, in the richest form its type allowed.
#[derive(Debug, Clone, PartialEq)]
pub enum Captured {
    /// The value serialised through `Serialize`.
    Json(serde_json::Value),
    /// The value's `Debug` rendering (its type has no `Serialize`).
    Debug(String),
    /// Only the type's name (the type has neither `Serialize` nor `Debug`).
    TypeName(&'static str),
}

impl Captured {
    /// The capture as a JSON value: structured for `Json`, a string otherwise.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Json(v) => v.clone(),
            Self::Debug(s) => serde_json::Value::String(s.clone()),
            Self::TypeName(t) => serde_json::Value::String(format!("<{t}>")),
        }
    }

    /// The capture as a JSON value, without copying a structured one.
    pub fn into_json(self) -> serde_json::Value {
        match self {
            Self::Json(v) => v,
            Self::Debug(s) => serde_json::Value::String(s),
            Self::TypeName(t) => serde_json::Value::String(format!("<{t}>")),
        }
    }

    /// The capture as display text: JSON strings are unquoted, other JSON is compact JSON.
    pub fn to_text(&self) -> String {
        match self {
            Self::Json(serde_json::Value::String(s)) => s.clone(),
            Self::Json(v) => v.to_string(),
            Self::Debug(s) => s.clone(),
            Self::TypeName(t) => format!("<{t}>"),
        }
    }

    /// Whether the rendering is JSON (for `input.mime_type` / `output.mime_type`).
    pub fn is_json(&self) -> bool {
        matches!(self, Self::Json(v) if !v.is_string())
    }
}

/// Wraps a reference so the capture traits can be selected by auto-reference.
pub struct Probe<'a, T: ?Sized>(pub &'a T);

/// The capture and outcome traits are public only so that the macros' expansions can name them; a
/// supertrait nobody outside this crate can name keeps anyone from implementing them.
mod sealed {
    pub trait Sealed {}
    impl<T: ?Sized> Sealed for super::Probe<'_, T> {}
    impl<T: Sealed + ?Sized> Sealed for &T {}
}

/// Highest priority: the type is `Serialize`.
pub trait CaptureViaSerialize: sealed::Sealed {
    /// Capture the probed value.
    fn __waxell_capture(&self) -> Captured;
}
/// Middle priority: the type is `Debug`.
pub trait CaptureViaDebug: sealed::Sealed {
    /// Capture the probed value.
    fn __waxell_capture(&self) -> Captured;
}
/// Fallback: only the type name is known.
pub trait CaptureViaTypeName: sealed::Sealed {
    /// Capture the probed value.
    fn __waxell_capture(&self) -> Captured;
}

impl<T: Serialize + ?Sized> CaptureViaSerialize for &&Probe<'_, T> {
    fn __waxell_capture(&self) -> Captured {
        match serde_json::to_value(self.0) {
            Ok(v) => Captured::Json(v),
            // Serialisation can fail (e.g. maps with non-string keys); fall back to the type name.
            Err(_) => Captured::TypeName(std::any::type_name::<T>()),
        }
    }
}
impl<T: Debug + ?Sized> CaptureViaDebug for &Probe<'_, T> {
    fn __waxell_capture(&self) -> Captured {
        Captured::Debug(format!("{:?}", self.0))
    }
}
impl<T: ?Sized> CaptureViaTypeName for Probe<'_, T> {
    fn __waxell_capture(&self) -> Captured {
        Captured::TypeName(std::any::type_name::<T>())
    }
}

/// What a function's return value says about its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The successful value (the `Ok` payload for a `Result`), if it should be captured.
    pub value: Option<Captured>,
    /// Set when the value is `Err`.
    pub error: Option<ErrorInfo>,
}

/// An `Err` value, described without requiring `Display`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorInfo {
    /// Short type name of the error (`error.type`).
    pub type_name: String,
    /// `Display` text if the error has it, else `Debug`, else the type name.
    pub message: String,
}

fn short_type_name<E: ?Sized>() -> String {
    let full = std::any::type_name::<E>();
    // Keep the last path segment of the outer type: `my_crate::errors::ToolError` -> `ToolError`.
    let outer = full.split('<').next().unwrap_or(full);
    outer.rsplit("::").next().unwrap_or(outer).to_owned()
}

fn error_info<E: ?Sized>(message: String) -> ErrorInfo {
    ErrorInfo {
        type_name: short_type_name::<E>(),
        message,
    }
}

/// Outcome of a value, chosen by auto-reference like [`CaptureViaSerialize`].
pub(crate) mod outcome {
    use super::*;

    // Tiers, highest priority first; `capture` says whether the successful value is wanted.
    /// `Result<T: Serialize, E: Display>`.
    pub trait ResultSerDisplay: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// `Result<T: Debug, E: Display>`.
    pub trait ResultDebugDisplay: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// `Result<T, E: Display>`.
    pub trait ResultAnyDisplay: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// `Result<T, E: Debug>`.
    pub trait ResultAnyDebug: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// `Result<T, E>`.
    pub trait ResultAnyAny: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// Not a `Result`, `Serialize`.
    pub trait PlainSer: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// Not a `Result`, `Debug`.
    pub trait PlainDebug: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }
    /// Anything else.
    pub trait PlainAny: super::sealed::Sealed {
        /// The probed value's outcome; the successful value only when `capture`.
        fn __waxell_outcome(&self, capture: bool) -> Outcome;
    }

    fn ok_or<T, E>(
        r: &Result<T, E>,
        capture: bool,
        ok: impl Fn(&T) -> Captured,
        err: impl Fn(&E) -> String,
    ) -> Outcome {
        match r {
            Ok(v) => Outcome {
                value: capture.then(|| ok(v)),
                error: None,
            },
            Err(e) => Outcome {
                value: None,
                error: Some(error_info::<E>(err(e))),
            },
        }
    }
    fn ser<T: Serialize + ?Sized>(v: &T) -> Captured {
        (&&&Probe(v)).__waxell_capture()
    }
    fn dbg<T: Debug + ?Sized>(v: &T) -> Captured {
        Captured::Debug(format!("{v:?}"))
    }
    fn name<T: ?Sized>(_: &T) -> Captured {
        Captured::TypeName(std::any::type_name::<T>())
    }

    impl<T: Serialize, E: Display> ResultSerDisplay for &&&&&&&Probe<'_, Result<T, E>> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            ok_or(self.0, capture, |v| ser(v), |e| e.to_string())
        }
    }
    impl<T: Debug, E: Display> ResultDebugDisplay for &&&&&&Probe<'_, Result<T, E>> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            ok_or(self.0, capture, |v| dbg(v), |e| e.to_string())
        }
    }
    impl<T, E: Display> ResultAnyDisplay for &&&&&Probe<'_, Result<T, E>> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            ok_or(self.0, capture, |v| name(v), |e| e.to_string())
        }
    }
    impl<T, E: Debug> ResultAnyDebug for &&&&Probe<'_, Result<T, E>> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            ok_or(self.0, capture, |v| name(v), |e| format!("{e:?}"))
        }
    }
    impl<T, E> ResultAnyAny for &&&Probe<'_, Result<T, E>> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            ok_or(self.0, capture, |v| name(v), |_| short_type_name::<E>())
        }
    }
    impl<T: Serialize + ?Sized> PlainSer for &&Probe<'_, T> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            Outcome {
                value: capture.then(|| ser(self.0)),
                error: None,
            }
        }
    }
    impl<T: Debug + ?Sized> PlainDebug for &Probe<'_, T> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            Outcome {
                value: capture.then(|| dbg(self.0)),
                error: None,
            }
        }
    }
    impl<T: ?Sized> PlainAny for Probe<'_, T> {
        fn __waxell_outcome(&self, capture: bool) -> Outcome {
            Outcome {
                value: capture.then(|| name(self.0)),
                error: None,
            }
        }
    }
}

/// Cut `text` to at most `max_chars` characters, marking the cut; a short enough owned string is returned
/// as it is (the common case: no copy).
pub(crate) fn truncate_owned(text: std::borrow::Cow<'_, str>, max_chars: usize) -> String {
    // A string of at most `max_chars` bytes has at most `max_chars` characters.
    if text.len() <= max_chars {
        return text.into_owned();
    }
    match text.char_indices().nth(max_chars) {
        None => text.into_owned(),
        Some((cut, _)) => {
            let total = text.chars().count();
            format!(
                "{}...[truncated {} of {} chars]",
                &text[..cut],
                total - max_chars,
                total
            )
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::needless_borrow,
    reason = "the extra references select the capture tier, as in the macros' expansions"
)]
mod tests {
    use super::outcome::*;
    use super::*;

    #[derive(Serialize)]
    struct Ser {
        a: u8,
    }
    #[derive(Debug)]
    struct Dbg;
    struct Opaque;

    #[test]
    fn capture_picks_the_richest_form() {
        assert_eq!(
            (&&&Probe(&Ser { a: 1 })).__waxell_capture(),
            Captured::Json(serde_json::json!({"a": 1}))
        );
        assert_eq!((&&&Probe(&Dbg)).__waxell_capture(), Captured::Debug("Dbg".into()));
        assert!(
            matches!((&&&Probe(&Opaque)).__waxell_capture(), Captured::TypeName(n) if n.ends_with("Opaque"))
        );
    }

    #[test]
    fn outcome_detects_errors_without_display() {
        let r: Result<u8, Dbg> = Err(Dbg);
        let o = (&&&&&&&&Probe(&r)).__waxell_outcome(true);
        assert_eq!(
            o.error.unwrap(),
            ErrorInfo {
                type_name: "Dbg".into(),
                message: "Dbg".into()
            }
        );
        let r: Result<u8, Opaque> = Err(Opaque);
        let o = (&&&&&&&&Probe(&r)).__waxell_outcome(true);
        assert_eq!(o.error.unwrap().type_name, "Opaque");
        let r: Result<u8, std::fmt::Error> = Ok(7);
        let o = (&&&&&&&&Probe(&r)).__waxell_outcome(true);
        assert_eq!(o.value, Some(Captured::Json(serde_json::json!(7))));
        assert!(o.error.is_none());
        let o = (&&&&&&&&Probe(&Opaque)).__waxell_outcome(false);
        assert_eq!(
            o,
            Outcome {
                value: None,
                error: None
            }
        );
    }

    #[test]
    fn truncate_marks_the_cut_on_char_boundaries() {
        let cut = |s: &str, n| truncate_owned(std::borrow::Cow::Borrowed(s), n);
        assert_eq!(cut("héllo", 10), "héllo");
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo", 2), "hé...[truncated 3 of 5 chars]");
    }
}
