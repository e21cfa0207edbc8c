/* SPDX-License-Identifier: MIT */
/*
 * One active instance: every copy of this program campaigns for the same
 * name; the leader does the work, the others stand by and take over when
 * it resigns, exits or dies.
 *
 *   dlock-election-example SPEC NAME ID SECONDS
 *
 * leads for SECONDS (doing its "work" once a second), then resigns.
 */
#include <dlock.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void on_event(dlock_election *e, dlock_election_event event, const char *leader_id,
                     void *user_data)
{
	(void)user_data;
	/* Runs on the client's callback thread; the main loop asks
	 * dlock_election_is_leader() before each piece of work. */
	if (event == DLOCK_ELECTION_SUSPENDED || event == DLOCK_ELECTION_LOST)
		fprintf(stderr, "%s: leadership %s: stop acting as leader\n", dlock_election_name(e),
		        event == DLOCK_ELECTION_LOST ? "lost" : "uncertain");
	else if (event == DLOCK_ELECTION_LEADER_CHANGED)
		printf("%s: the leader is now %s\n", dlock_election_name(e), leader_id ? leader_id : "nobody");
}

int main(int argc, char **argv)
{
	dlock_client *client = NULL;
	dlock_election *election = NULL;
	int rc, status = 1;

	if (argc != 5) {
		fprintf(stderr, "usage: %s SPEC NAME ID SECONDS\n", argv[0]);
		return 64;
	}
	rc = dlock_client_new(argv[1], &client);
	if (rc == DLOCK_OK)
		rc = dlock_election_new(client, argv[2], argv[3], &election);
	if (rc == DLOCK_OK)
		rc = dlock_election_set_callback(election, on_event, NULL);
	if (rc == DLOCK_OK)
		rc = dlock_election_observe(election, 1);
	if (rc == DLOCK_OK)
		rc = dlock_election_campaign(election, -1); /* stand by until elected */
	if (rc != DLOCK_OK) {
		fprintf(stderr, "election: %s: %s\n", dlock_strerror(rc), dlock_last_error_message());
		goto out;
	}
	printf("%s leads %s with fencing token %" PRIu64 "\n", argv[3], argv[2],
	       dlock_election_fencing_token(election));
	for (int i = 0; i < atoi(argv[4]); i++) {
		if (!dlock_election_is_leader(election)) {
			fprintf(stderr, "no longer leader: stopping\n");
			goto out;
		}
		/* ... the work only the leader does, sending the token with it ... */
		sleep(1);
	}
	rc = dlock_election_resign(election);   /* the next in line leads at once */
	status = rc == DLOCK_OK ? 0 : 1;
out:
	dlock_election_free(election);          /* resigns if still leading */
	dlock_client_free(client);
	return status;
}
