// Reads an edgeproc lake with DuckDB, as a data team would, and prints
// what daily/duckdb_test.go checks, as JSON: positions per market, date and
// courier, the number of (courier, timestamp_ms) held more than once, and
// each courier's distance on one date by SQL (distinct by timestamp, the
// first to arrive kept; LAG, haversine, afresh after restore_ttl; filters
// off).
//
//   node duckdb.mjs LAKE_DIR DATE RESTORE_TTL_MS
import { DuckDBInstance } from '@duckdb/node-api';

const [dir, date, ttl] = process.argv.slice(2);
const src = `read_parquet('${dir}/positions/**/*.parquet', hive_partitioning = true)`;
const db = await DuckDBInstance.create(':memory:');
const conn = await db.connect();
const rows = async (sql) => (await conn.runAndReadAll(sql)).getRowObjectsJson();

const counts = await rows(`
  SELECT market, strftime(date, '%Y-%m-%d') AS date, courier, count(*) AS n
  FROM ${src} GROUP BY ALL ORDER BY ALL`);
const dups = await rows(`
  SELECT count(*) AS n FROM (
    SELECT courier, timestamp_ms FROM ${src} GROUP BY ALL HAVING count(*) > 1)`);
const distance = await rows(`
  WITH p AS (
    SELECT courier, date, timestamp_ms AS ts, lat, lon FROM ${src}
    QUALIFY row_number() OVER (PARTITION BY courier, timestamp_ms ORDER BY arrival_ms) = 1),
  s AS (
    SELECT *, lag(ts) OVER w AS pts, lag(lat) OVER w AS plat, lag(lon) OVER w AS plon
    FROM p WINDOW w AS (PARTITION BY courier ORDER BY ts))
  SELECT courier, count(*) AS positions,
    sum(CASE WHEN pts IS NULL OR ts - pts > ${ttl} THEN 0 ELSE
      2 * 6371008.8 * asin(sqrt(least(1,
        pow(sin(radians(lat - plat) / 2), 2) +
        cos(radians(plat)) * cos(radians(lat)) * pow(sin(radians(lon - plon) / 2), 2)))) END) AS distance_m
  FROM s WHERE date = DATE '${date}' GROUP BY courier ORDER BY courier`);
console.log(JSON.stringify({ counts, duplicates: Number(dups[0].n), distance }));
