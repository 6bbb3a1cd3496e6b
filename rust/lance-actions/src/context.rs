//! Transaction-level context: what belongs to the transaction rather than to one action.
//!
//! Two things live here. The *shell*: which Lance operation the actions lower to, plus the
//! operation-level labels that no action owns (a delete's predicate, an update's mode). And the
//! MemWAL compaction progress (`compacted_sstables`), which Lance carries on three different operation
//! shells and which the driver checks like an action (`design/action-model.md`, transaction context).

use std::fmt;

use lance_table::system_index::mem_wal::CompactedSsTable;
use lance_table::transaction::{Operation, UpdateMode, UpdatedFragmentOffsets};

use crate::action::{ActionKind, PeerAction};
use crate::path::{ConfigMap, ManifestPath, Mask};
use crate::verdict::{Reason, Rule, Verdict};

/// The 17 Lance 14.0.2 operation kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperationKind {
    Append,
    Delete,
    Overwrite,
    CreateIndex,
    Rewrite,
    DataReplacement,
    DataOverlay,
    Merge,
    Restore,
    ReserveFragments,
    Update,
    Project,
    UpdateConfig,
    UpdateMemWalState,
    Clone,
    UpdateBases,
    Unknown,
}

impl OperationKind {
    pub const ALL: [OperationKind; 17] = [
        Self::Append,
        Self::Delete,
        Self::Overwrite,
        Self::CreateIndex,
        Self::Rewrite,
        Self::DataReplacement,
        Self::DataOverlay,
        Self::Merge,
        Self::Restore,
        Self::ReserveFragments,
        Self::Update,
        Self::Project,
        Self::UpdateConfig,
        Self::UpdateMemWalState,
        Self::Clone,
        Self::UpdateBases,
        Self::Unknown,
    ];

    pub fn of(op: &Operation) -> Self {
        match op {
            Operation::Append { .. } => Self::Append,
            Operation::Delete { .. } => Self::Delete,
            Operation::Overwrite { .. } => Self::Overwrite,
            Operation::CreateIndex { .. } => Self::CreateIndex,
            Operation::Rewrite { .. } => Self::Rewrite,
            Operation::DataReplacement { .. } => Self::DataReplacement,
            Operation::DataOverlay { .. } => Self::DataOverlay,
            Operation::Merge { .. } => Self::Merge,
            Operation::Restore { .. } => Self::Restore,
            Operation::ReserveFragments { .. } => Self::ReserveFragments,
            Operation::Update { .. } => Self::Update,
            Operation::Project { .. } => Self::Project,
            Operation::UpdateConfig { .. } => Self::UpdateConfig,
            Operation::UpdateMemWalState { .. } => Self::UpdateMemWalState,
            Operation::Clone { .. } => Self::Clone,
            Operation::UpdateBases { .. } => Self::UpdateBases,
            Operation::Unknown { .. } => Self::Unknown,
        }
    }

    /// Two-letter column code used in matrices (as in the reference's Lance matrix).
    pub fn code(self) -> &'static str {
        match self {
            Self::Append => "Ap",
            Self::Delete => "De",
            Self::Overwrite => "Ow",
            Self::CreateIndex => "CI",
            Self::Rewrite => "Rw",
            Self::DataReplacement => "DR",
            Self::DataOverlay => "DO",
            Self::Merge => "Me",
            Self::Restore => "Rs",
            Self::ReserveFragments => "RF",
            Self::Update => "Up",
            Self::Project => "Pr",
            Self::UpdateConfig => "UC",
            Self::UpdateMemWalState => "MW",
            Self::Clone => "Cl",
            Self::UpdateBases => "UB",
            Self::Unknown => "Un",
        }
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Transaction-level context. Encoded with the actions; `assigned_fragment_ids` is apply output only.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnContext {
    /// The Lance operation these actions lower to.
    pub shell: OperationKind,
    /// `Delete.predicate`.
    pub predicate: String,
    /// `Update.update_mode`.
    pub update_mode: Option<UpdateMode>,
    /// `Update.fields_for_preserving_frag_bitmap`.
    pub fields_for_preserving_frag_bitmap: Vec<u32>,
    /// `Update.updated_fragment_offsets`.
    pub updated_fragment_offsets: Option<UpdatedFragmentOffsets>,
    /// MemWAL shards' compacted generations (`Update` / `UpdateMemWalState`).
    pub compacted_sstables: Vec<CompactedSsTable>,
    /// Fragment ids bound by `apply`, in the order new fragments were added.
    pub assigned_fragment_ids: Vec<u64>,
    /// The original commits (transaction uuids) this transaction replays from another branch. Two
    /// transactions replaying one commit conflict, so a commit is never replayed twice onto a table.
    /// Carried in our encoding only: no Lance operation has a slot for it.
    pub replay_origins: Vec<String>,
}

impl TxnContext {
    pub fn new(shell: OperationKind) -> Self {
        Self {
            shell,
            predicate: String::new(),
            update_mode: None,
            fields_for_preserving_frag_bitmap: Vec::new(),
            updated_fragment_offsets: None,
            compacted_sstables: Vec::new(),
            assigned_fragment_ids: Vec::new(),
            replay_origins: Vec::new(),
        }
    }

    /// The MemWAL shards whose generation this transaction advances.
    pub fn writes(&self) -> Mask {
        let mut mask = Mask(self.compacted_sstables.iter().map(|s| ManifestPath::MemWalShard(s.shard_id)).collect());
        for origin in &self.replay_origins {
            mask.push(ManifestPath::ConfigEntry { map: ConfigMap::Config, key: Self::replay_claim(origin) });
        }
        mask
    }

    /// The MemWAL rule: for a shard both advance, a committed generation at or past ours means our
    /// work was already compacted (Fail); a committed generation behind ours means re-read (Retry).
    pub fn rebase(&self, peer_version: u64, peer: &TxnContext) -> Verdict {
        if let Some(origin) = self.replay_origins.iter().find(|o| peer.replay_origins.contains(o)) {
            return Verdict::Fail(Reason {
                rule: Rule::AlreadyReplayed,
                ours: ActionKind::TxnContext,
                peer_version: Some(peer_version),
                peer_action: Some(ActionKind::TxnContext),
                path: Some(ManifestPath::ConfigEntry { map: ConfigMap::Config, key: Self::replay_claim(origin) }),
                detail: format!("the committed transaction already replays commit {origin}"),
            });
        }
        for ours in &self.compacted_sstables {
            let Some(theirs) = peer.compacted_sstables.iter().find(|t| t.shard_id == ours.shard_id) else {
                continue;
            };
            let reason = Reason {
                rule: Rule::MemWalGeneration,
                ours: ActionKind::TxnContext,
                peer_version: Some(peer_version),
                peer_action: Some(ActionKind::TxnContext),
                path: Some(ManifestPath::MemWalShard(ours.shard_id)),
                detail: format!("ours generation {}, committed {}", ours.generation, theirs.generation),
            };
            return if theirs.generation >= ours.generation { Verdict::Fail(reason) } else { Verdict::Retry(reason) };
        }
        Verdict::Ok
    }

    /// The manifest coordinate a replay of `origin` claims (never written to the config itself).
    fn replay_claim(origin: &str) -> String {
        format!("lance-actions.replay.claim.{origin}")
    }

    /// Is the peer a row-moving update (rows deleted here reappear in new fragments)?
    pub fn moves_rows(&self) -> bool {
        self.shell == OperationKind::Update && self.update_mode != Some(UpdateMode::RewriteColumns)
    }
}

/// A convenience for rebase code: the peer's transaction shell.
pub fn peer_shell(peer: &PeerAction<'_>) -> OperationKind {
    peer.context.shell
}
