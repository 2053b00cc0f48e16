//! Runs in a project: where metrics are logged.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Unique id.
    pub id: String,
    /// Display name (not unique).
    pub name: String,
    /// The user who created it.
    pub creator: String,
    /// Unix seconds.
    pub created_at: u64,
    /// `running` until it ends (runs stored before states were kept read
    /// as running).
    #[serde(default)]
    pub state: RunState,
}

/// Where a run stands, as W&B names it. A run starts `running` and ends
/// once, in one of the other states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Still logging.
    #[default]
    Running,
    /// Ended well.
    Finished,
    /// Ended with an error.
    Failed,
    /// Stopped without saying why.
    Crashed,
    /// Stopped by someone (never fires an automation, as in W&B).
    Killed,
}

impl RunState {
    /// Every state.
    pub const ALL: [RunState; 5] = [
        RunState::Running,
        RunState::Finished,
        RunState::Failed,
        RunState::Crashed,
        RunState::Killed,
    ];

    /// The name, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Failed => "failed",
            RunState::Crashed => "crashed",
            RunState::Killed => "killed",
        }
    }

    /// The state named `name`.
    pub fn parse(name: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
