#[derive(Debug, clap::Args)]
pub struct CheckHostArgs {}

pub async fn run(_args: CheckHostArgs) -> crate::Result<i32> {
    Ok(0)
}
