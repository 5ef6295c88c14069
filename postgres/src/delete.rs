//! Deleting a run: every row of it, in one transaction.

use tollgate_checkpoint::{RunId, RunStatus, StoreError};

use crate::conn::client_error;
use crate::rows::column;
use crate::sql::Sql;
use crate::store::PostgresStore;

impl PostgresStore {
    /// `RunStore::delete_run`: every row of one run, in one transaction,
    /// refused while it runs.
    pub(crate) async fn remove_run(&self, run: RunId) -> Result<(), StoreError> {
        self.frontiers.forget(run);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(client_error)?;
        let id = run.to_string();
        let row = tx
            .row_opt_of(self.unnamed, "SELECT status FROM runs WHERE id = $1 FOR UPDATE", &[&id])
            .await
            .map_err(client_error)?
            .ok_or(StoreError::RunNotFound { run })?;
        if column::<String>(&row, 0)? == RunStatus::Running.as_str() {
            return Err(StoreError::RunInFlight { run });
        }
        for table in ["steps", "snapshots", "pending_writes", "interrupts", "events", "attachments"]
        {
            // The names are this list's; the run id is a parameter.
            tx.exec_of(self.unnamed, &format!("DELETE FROM {table} WHERE run = $1"), &[&id])
                .await
                .map_err(client_error)?;
        }
        tx.exec_of(self.unnamed, "DELETE FROM runs WHERE id = $1", &[&id])
            .await
            .map_err(client_error)?;
        tx.commit().await.map_err(client_error)
    }
}
