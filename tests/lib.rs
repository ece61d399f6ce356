//! Workspace-level test helpers.
