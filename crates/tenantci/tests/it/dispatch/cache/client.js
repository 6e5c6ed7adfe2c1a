// A job step's use of the official @actions/cache package (v1 protocol over ACTIONS_CACHE_URL,
// as actions/cache@v4 runs on Gitea): `save KEY` or `restore KEY [RESTORE_KEY...]` of the
// directory `data` under the working directory. Prints one JSON line: {"id": N} after a save
// (-1: the toolkit refused or failed quietly, as it does), {"hit": KEY|null} after a restore.
// ACTIONS_CACHE_URL and ACTIONS_RUNTIME_TOKEN come from the environment, as the runner sets them.
const cache = require('@actions/cache');

async function main() {
  const [mode, key, ...restoreKeys] = process.argv.slice(2);
  if (mode === 'save') {
    const id = await cache.saveCache(['data'], key);
    console.log(JSON.stringify({ id }));
  } else if (mode === 'restore') {
    const hit = await cache.restoreCache(['data'], key, restoreKeys);
    console.log(JSON.stringify({ hit: hit === undefined ? null : hit }));
  } else {
    throw new Error(`usage: client.js save|restore KEY [RESTORE_KEY...], got ${mode}`);
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
