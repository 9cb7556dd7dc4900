//! The kinds of span waxell's attribute macros make (`#[agent]`, `#[tool]`, ...) and the names that go with
//! each: the attribute, the GenAI operation (`gen_ai.operation.name`) and the span-name prefix.
//!
//! Defined here once for two crates: `waxell-macros` puts a kind's span name into the expansion as a
//! literal at compile time (so a call never formats it), and `waxell` records its attributes at run time. A
//! proc-macro crate cannot use a crate that depends on it (`waxell` re-exports the macros), so both depend on
//! this one, which depends on nothing. Not public API of `waxell`: use the macros.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Which attribute made a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `#[agent]`.
    Agent,
    /// `#[tool]`.
    Tool,
    /// `#[reasoning]`.
    Reasoning,
    /// `#[decision]`.
    Decision,
    /// `#[step]`.
    Step,
    /// `#[retrieval]`.
    Retrieval,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 6] = [
        Kind::Agent,
        Kind::Tool,
        Kind::Reasoning,
        Kind::Decision,
        Kind::Step,
        Kind::Retrieval,
    ];

    /// The attribute's name: `agent` for `#[agent]`.
    pub const fn attribute(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Tool => "tool",
            Kind::Reasoning => "reasoning",
            Kind::Decision => "decision",
            Kind::Step => "step",
            Kind::Retrieval => "retrieval",
        }
    }

    /// The variant's name, as the macros write it in an expansion: `Agent`.
    pub const fn variant(self) -> &'static str {
        match self {
            Kind::Agent => "Agent",
            Kind::Tool => "Tool",
            Kind::Reasoning => "Reasoning",
            Kind::Decision => "Decision",
            Kind::Step => "Step",
            Kind::Retrieval => "Retrieval",
        }
    }

    /// `gen_ai.operation.name`, which is also the span name's prefix: `invoke_agent` (a span is named
    /// `invoke_agent {name}`). The GenAI conventions name `invoke_agent` and `execute_tool`; the others are
    /// waxell's.
    pub const fn operation(self) -> &'static str {
        match self {
            Kind::Agent => "invoke_agent",
            Kind::Tool => "execute_tool",
            Kind::Reasoning => "reasoning",
            Kind::Decision => "decide",
            Kind::Step => "step",
            Kind::Retrieval => "retrieval",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn names_are_distinct() {
        for (i, a) in Kind::ALL.iter().enumerate() {
            for b in &Kind::ALL[i + 1..] {
                assert_ne!(a.attribute(), b.attribute());
                assert_ne!(a.variant(), b.variant());
                assert_ne!(a.operation(), b.operation());
            }
        }
    }
}
