//! `vramshare`: run a job under a GPU memory quota, and see what every
//! vramshare process holds, live or afterwards. It reads the shared files
//! in `VRAMSHARE_DIR`; it never loads CUDA.

mod dump;
mod exporter;
mod out;
mod ps;
mod quota;
mod replay;
mod report;
mod report_access;
mod run;
mod show;
mod snapshot;
mod timeline;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand};
use vramshare_common::settings::{Priority, Spill};

#[derive(Parser)]
#[command(
    name = "vramshare",
    version,
    about = "Share one GPU's memory between jobs: quotas, spill to host memory, and who holds what"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the shared files are: `--dir`, else `VRAMSHARE_DIR`, else
/// `/dev/shm/vramshare-$UID`.
#[derive(clap::Args, Clone)]
struct DirArg {
    /// Folder of the shared registry and trace ring [default: $VRAMSHARE_DIR or /dev/shm/vramshare-$UID]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl DirArg {
    fn path(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(vramshare_common::files::default_dir)
    }
}

/// The trace a picture is drawn from: a file, or the live ring.
#[derive(clap::Args)]
struct TraceSource {
    /// The trace JSON file (from `dump` or VRAMSHARE_TRACE) [default: the live ring]
    file: Option<PathBuf>,
    /// Only this process
    #[arg(long)]
    pid: Option<u32>,
    #[command(flatten)]
    dir: DirArg,
}

impl TraceSource {
    fn load(&self) -> Result<vramshare_common::trace_json::TraceJson, out::Failure> {
        timeline::load(self.file.as_deref(), &self.dir.path(), self.pid)
    }
}

/// A setting's words for clap: listed in `--help`, parsed into the setting
/// (clap has checked the word, so the default is never reached).
macro_rules! setting_parser {
    ($setting:ty) => {
        clap::builder::PossibleValuesParser::new(<$setting>::NAMES)
            .map(|word| <$setting>::parse(&word).unwrap_or_default())
    };
}

fn parse_pool_name(text: &str) -> Result<String, String> {
    vramshare_common::pool::check_name(text).map(|_| text.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Run a command with libvramshare.so preloaded and the given quota; its exit status is returned unchanged
    #[command(arg_required_else_help = true)]
    Run {
        /// Device bytes the job may hold per device: 8GiB, 512MiB, 50%, or per device 0=8GiB,1=4GiB
        #[arg(long, value_name = "SIZE", value_parser = parse_quota)]
        quota: Option<String>,
        /// What an allocation over the quota gets: host (managed memory on the host, mapped for the GPU) or off (CUDA's out-of-memory error)
        #[arg(long, value_parser = setting_parser!(Spill))]
        spill: Option<Spill>,
        /// Write each process's trace as JSON at exit (%p becomes the pid)
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Share a budget with the other processes of this pool
        #[arg(long, value_name = "NAME", value_parser = parse_pool_name)]
        pool: Option<String>,
        /// The pool's budget, if the pool has none yet (the forms of --quota)
        #[arg(long, value_name = "SIZE", value_parser = parse_quota, requires = "pool")]
        pool_quota: Option<String>,
        /// Who gives way when the pool is full: high (never displaced), normal, or low (spills first)
        #[arg(long, value_parser = setting_parser!(Priority))]
        priority: Option<Priority>,
        #[command(flatten)]
        dir: DirArg,
        /// The command and its arguments
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<String>,
    },
    /// One row per live process and device: quota, device bytes, spilled bytes, peak
    Ps {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DirArg,
    },
    /// The `ps` table, refreshed in the terminal until q or Ctrl-C
    Top {
        /// Refresh interval in milliseconds
        #[arg(long, default_value_t = 1000, value_name = "MS")]
        interval: u64,
        /// Stop after this many refreshes (and print plainly, for scripts)
        #[arg(long, value_name = "N")]
        iterations: Option<u64>,
        #[command(flatten)]
        dir: DirArg,
    },
    /// The events in the shared trace ring as vramshare-trace/1 JSON
    Dump {
        /// Only this process's events
        #[arg(long)]
        pid: Option<u32>,
        /// Write to FILE instead of standard output
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Read or change the quota of a running process
    #[command(subcommand)]
    Quota(QuotaCommand),
    /// Draw a trace over time: Chrome trace-event JSON for ui.perfetto.dev (-o FILE.json), or a self-contained page (-o FILE.html)
    #[command(arg_required_else_help = true)]
    Timeline {
        #[command(flatten)]
        source: TraceSource,
        /// Where to write it; a name ending in .html gives the page, any other the JSON
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Write a trace as a PyTorch memory snapshot pickle, for pytorch.org/memory_viz or torch.cuda._memory_viz
    #[command(arg_required_else_help = true)]
    Snapshot {
        #[command(flatten)]
        source: TraceSource,
        /// Where to write the pickle
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Serve the shared files as Prometheus metrics on /metrics, read afresh at each scrape
    Exporter {
        /// Where to listen, HOST:PORT
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9400")]
        listen: String,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Summarise a trace (from `dump` or VRAMSHARE_TRACE): peaks, spills, promotions, rejections, leaks, largest allocations
    Report {
        /// The trace JSON file
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum QuotaCommand {
    /// Each live process's quota and device bytes, per device
    Get {
        /// Only this process
        #[arg(long)]
        pid: Option<u32>,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Change a running process's quota, or a pool's budget, on one device; the jobs notice within 100 ms
    #[command(arg_required_else_help = true)]
    #[command(group = clap::ArgGroup::new("target").required(true).args(["pid", "pool"]))]
    Set {
        /// The process
        #[arg(long)]
        pid: Option<u32>,
        /// The pool (VRAMSHARE_POOL)
        #[arg(long, value_name = "NAME")]
        pool: Option<String>,
        /// The device
        #[arg(long, default_value_t = 0)]
        device: u32,
        /// The new quota: 8GiB, 512MiB, 1048576, or none
        #[arg(value_name = "SIZE", value_parser = quota::parse_set_size)]
        size: quota::NewQuota,
        #[command(flatten)]
        dir: DirArg,
    },
}

fn parse_quota(text: &str) -> Result<String, String> {
    vramshare_common::size::parse_quota(text)
        .map(|_| text.to_string())
        .map_err(|why| {
            format!(
                "{why}; accepted forms: {}",
                vramshare_common::size::QUOTA_FORMS
            )
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run {
            quota,
            spill,
            trace,
            pool,
            pool_quota,
            priority,
            dir,
            command,
        } => run::run(run::Options {
            quota,
            spill: spill.map(Spill::name),
            trace,
            pool,
            pool_quota,
            priority: priority.map(Priority::name),
            dir: dir.dir,
            command,
        }),
        Command::Ps { json, dir } => ps::ps(&dir.path(), json),
        Command::Top {
            interval,
            iterations,
            dir,
        } => ps::top(&dir.path(), interval, iterations),
        Command::Dump { pid, output, dir } => dump::dump(&dir.path(), pid, output.as_deref()),
        Command::Report { file } => report::report(&file),
        Command::Timeline { source, output } => source
            .load()
            .and_then(|trace| timeline::timeline(&trace, source.pid, &output)),
        Command::Snapshot { source, output } => source
            .load()
            .and_then(|trace| snapshot::snapshot(&trace, source.pid, &output)),
        Command::Exporter { listen, dir } => Ok(exporter::serve(&dir.path(), &listen)),
        Command::Quota(QuotaCommand::Get { pid, json, dir }) => quota::get(&dir.path(), pid, json),
        Command::Quota(QuotaCommand::Set {
            pid,
            pool,
            device,
            size,
            dir,
        }) => match (pid, pool) {
            (Some(pid), _) => quota::set(&dir.path(), pid, device, size),
            (None, Some(pool)) => quota::set_pool(&dir.path(), &pool, device, size),
            (None, None) => unreachable!("clap requires --pid or --pool"),
        },
    };
    result.unwrap_or_else(out::exit_code)
}
