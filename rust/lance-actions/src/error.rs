//! Typed errors of the action model. Every variant says what was wrong and what the caller can do.

use snafu::Snafu;

/// Errors raised while translating, encoding or decoding actions.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum Error {
    /// A Lance operation the action model cannot represent (for example `Operation::Unknown`, written
    /// by a newer Lance). It is never silently dropped: the caller must treat it as opaque.
    #[snafu(display("cannot represent Lance operation {operation} as actions: {reason}"))]
    Unrepresentable { operation: String, reason: String },

    /// An action list that no single Lance operation can express, so it cannot be lowered.
    #[snafu(display(
        "cannot lower {shell} actions to a Lance operation: {reason}. Split the work into one transaction per operation kind"
    ))]
    NotLowerable { shell: String, reason: String },

    /// The encoded action list is damaged (truncated, a missing field, an unknown action kind).
    #[snafu(display(
        "encoded action list is corrupt: {reason}. The commit that wrote it cannot be trusted; treat it as conflicting"
    ))]
    CorruptEncoding { reason: String },

    /// The encoded action list was written by a newer format than this build understands.
    #[snafu(display(
        "encoded action list has format version {found}, newer than the {supported} this build reads; upgrade lance-actions"
    ))]
    NewerFormat { found: u32, supported: u32 },

    /// An encoded action list rides on an operation it does not lower to: a writer copied it from
    /// another commit (or forged it). Its actions cannot stand for what that commit did.
    #[snafu(display(
        "the encoded action list does not describe the {operation} it was committed with: {reason}. The commit that wrote it cannot be trusted; treat it as conflicting"
    ))]
    ActionsMismatch { operation: String, reason: String },

    /// A Lance structure inside an action failed Lance's own conversion.
    #[snafu(display("lance structure in action {action} is invalid: {source}"))]
    Lance { action: String, source: lance_core::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
