//! Typed errors of the commit layer.

use snafu::Snafu;

#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum Error {
    #[snafu(display("{uri} is not a Lance dataset (or cannot be opened): {source}"))]
    Open { uri: String, source: lance::Error },

    #[snafu(display(
        "version {version} has no transaction (it was cleaned up), so commits read before it cannot be checked; re-read at the latest version"
    ))]
    MissingTransaction { version: u64 },

    #[snafu(display("the action list committed at version {version} cannot be read: {source}"))]
    PeerActions { version: u64, source: lance_actions::Error },

    #[snafu(display("cannot translate the transaction: {source}"))]
    Model { source: lance_actions::Error },

    #[snafu(display("{what}: {source}"))]
    Lance { what: String, source: lance::Error },

    #[snafu(display("read version {read_version} is newer than the latest version {latest}"))]
    ReadVersionAhead { read_version: u64, latest: u64 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach a description to a Lance error.
pub(crate) trait LanceContext<T> {
    fn lance(self, what: impl Into<String>) -> Result<T>;
}

impl<T> LanceContext<T> for std::result::Result<T, lance::Error> {
    fn lance(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|source| Error::Lance { what: what.into(), source })
    }
}
