"""A process that takes a lease and holds it (renewing) until killed: python -m tests.lease_holder ENDPOINT NAME"""

import sys
import time

from robolearn.hardware.resources import LeaseClient

client = LeaseClient(sys.argv[1], sys.argv[2])
print("granted", *client.acquire("sim_so101"), flush=True)
while True:
    time.sleep(1)
