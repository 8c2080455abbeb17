//! The statements of an operator's reads without a lease (the CLI's `executions list|show`,
//! docs/semantics.md §12.5): held and released executions of any principal, with their owner's
//! lease.

/// The owner's lease as an operator sees it, from `carmy.instances i` joined by
/// [`owner_lease_join!`]: `owner_hostname`, `owner_pid`, `owner_lease_expires_at` (each `NULL`
/// when the owner has no row).
macro_rules! owner_lease_columns {
    () => {
        "i.hostname AS owner_hostname, i.pid AS owner_pid, \
         i.lease_expires_at AS owner_lease_expires_at"
    };
}

/// Joins the owner's lease `carmy.instances i` to the rows of `$table` (its alias), by their
/// `owner_instance`.
macro_rules! owner_lease_join {
    ($table:literal) => {
        concat!(
            " LEFT JOIN carmy.instances i ON i.instance_id = ",
            $table,
            ".owner_instance"
        )
    };
}

/// What an operator's reads of held executions return, from `carmy.reservations r` joined with
/// its owner's lease `carmy.instances i`: the identity, [`record_columns!`], `owner_instance`,
/// `created_at`, `started_at`, `finished_at`, the kept `arguments`, and the owner's `owner_hostname`, `owner_pid` and
/// `owner_lease_expires_at` (`NULL` when it has no row).
macro_rules! operator_columns {
    () => {
        concat!(
            "r.principal, r.session_id, r.request_id, r.arguments, ",
            record_columns!(),
            ", r.owner_instance, r.created_at, r.started_at, r.finished_at, ",
            owner_lease_columns!(),
            " FROM carmy.reservations r",
            owner_lease_join!("r")
        )
    };
}

/// The columns of [`super::FIND_RELEASED_SQL`] plus the released execution's `owner_instance`,
/// `created_at`, `started_at` and its owner's lease (as [`operator_columns!`]), from
/// `carmy.released_executions h`.
macro_rules! operator_released_columns {
    () => {
        concat!(
            "h.principal, h.session_id, h.request_id, \
             h.execution_id, h.tool, h.fingerprint, h.fingerprint_version, \
             h.in_flight_state, h.released_by, \
             date_trunc('milliseconds', h.released_at) AS released_at, h.note, h.arguments, \
             h.owner_instance, h.created_at, h.started_at, NULL::timestamptz AS finished_at, ",
            owner_lease_columns!(),
            " FROM carmy.released_executions h",
            owner_lease_join!("h")
        )
    };
}

/// The filters every operator listing of held executions shares. Binds: `$1` principal, `$2`
/// session_id, `$3` request_id (each `NULL` for any), `$4` limit, `$5` a JSON value (text)
/// the kept arguments must contain (`NULL`: any; docs/semantics.md §8.5).
macro_rules! operator_filters {
    () => {
        " WHERE ($1::text IS NULL OR r.principal = $1) \
           AND ($2::text IS NULL OR r.session_id = $2) \
           AND ($3::text IS NULL OR r.request_id = $3) \
           AND ($5::text IS NULL OR carmy.arguments_jsonb(r.arguments) @> carmy.arguments_jsonb($5::text))"
    };
}

/// An operator's listing of held executions in any state (the CLI's `executions list`), oldest
/// reservation first. Binds as `operator_filters!`: `$1`..`$4`.
pub const OPERATOR_LIST_SQL: &str = concat!(
    "SELECT ",
    operator_columns!(),
    operator_filters!(),
    " ORDER BY r.created_at, r.execution_id LIMIT $4"
);

/// As [`OPERATOR_LIST_SQL`], only executions without an outcome whose in-flight state
/// ([`in_flight_state!`]) is `$6` (`running` or `interrupted`).
pub const OPERATOR_LIST_IN_FLIGHT_SQL: &str = concat!(
    "SELECT ",
    operator_columns!(),
    operator_filters!(),
    " AND r.state = 'running' AND ",
    in_flight_state!("r"),
    " = $6 ORDER BY r.created_at, r.execution_id LIMIT $4"
);

/// As [`OPERATOR_LIST_SQL`], only finished executions of status `$6` (`completed`, `failed`,
/// `timed_out`, `cancelled`).
pub const OPERATOR_LIST_FINISHED_SQL: &str = concat!(
    "SELECT ",
    operator_columns!(),
    operator_filters!(),
    " AND r.state = $6 AND r.state <> 'running' \
     ORDER BY r.created_at, r.execution_id LIMIT $4"
);

/// An operator's listing of released executions (`carmy.released_executions`), oldest
/// reservation first. Binds as [`OPERATOR_LIST_SQL`].
pub const OPERATOR_LIST_RELEASED_SQL: &str = concat!(
    "SELECT ",
    operator_released_columns!(),
    " WHERE ($1::text IS NULL OR h.principal = $1) \
       AND ($2::text IS NULL OR h.session_id = $2) \
       AND ($3::text IS NULL OR h.request_id = $3) \
       AND ($5::text IS NULL OR carmy.arguments_jsonb(h.arguments) @> carmy.arguments_jsonb($5::text)) \
     ORDER BY h.created_at, h.execution_id LIMIT $4"
);

/// An operator's read of one held execution of any principal. Binds: `$1` execution_id.
pub const OPERATOR_SHOW_SQL: &str =
    concat!("SELECT ", operator_columns!(), " WHERE r.execution_id = $1");

/// An operator's read of one released execution of any principal. Binds: `$1` execution_id.
pub const OPERATOR_SHOW_RELEASED_SQL: &str = concat!(
    "SELECT ",
    operator_released_columns!(),
    " WHERE h.execution_id = $1"
);
